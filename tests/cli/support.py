"""Running ``parkway`` as a user does: a process of its own on the embedded defaults, in a home of its own.

The test session's ``PARKWAY_*`` settings (tests/conftest.py puts them in ``os.environ``) are left out
of the child's environment, so it truly runs on the embedded PostgreSQL and the embedded Valkey of its home.
Each command (and ``parkway up``) is forked from the suite's fork server (tests/forkserver.py: the libraries
and models already imported, nothing that reads a setting), in a session of its own, with only that
environment, and ends as a fresh process does; ``PARKWAY_TEST_FORK=0`` starts each as a fresh process. What
``parkway up`` starts is started by it, as a user's would be.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, create_engine

from parkway import embedded
from tests import forkserver
from tests.support import FORK_WORKERS, ROOT, wait_for


def embedded_env(**extra: str) -> dict[str, str]:
    """This environment without any ``PARKWAY_*``/``FLOWER_*`` name: nothing configured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARKWAY_", "FLOWER_"))}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", **extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parkway(*args: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m parkway.cli *args`` in ``env`` and ``cwd``, its output captured: forked from the suite's fork
    server (tests/forkserver.py; ``PARKWAY_TEST_FORK=0``: a fresh process), ending as a fresh process ends
    (its exit handlers run: the embedded PostgreSQL a command started is stopped)."""
    if FORK_WORKERS:
        return forkserver.run("parkway.cli", list(args), env=env, cwd=cwd, timeout=timeout, at_exit=True)
    return subprocess.run(
        [sys.executable, "-m", "parkway.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def launch(
    args: list[str], *, env: dict[str, str], cwd: Path, out: Path, err: Path
) -> subprocess.Popen[bytes] | forkserver.Forked:
    """``python -m parkway.cli *args`` started in a session of its own, its stdout and stderr to ``out`` and
    ``err``: forked from the fork server as ``parkway`` is (``PARKWAY_TEST_FORK=0``: a fresh process)."""
    if FORK_WORKERS:
        return forkserver.spawn("parkway.cli", args, env=env, cwd=cwd, log=out, err=err, at_exit=True)
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        return subprocess.Popen([sys.executable, "-m", "parkway.cli", *args], cwd=cwd, env=env, stdout=stdout,
                                stderr=stderr, start_new_session=True)  # fmt: skip


def child_pids(stdout: str) -> dict[str, int]:
    """``starting api (pid 12)… worker (pid 13)…`` → ``{"api": 12, "worker": 13}``."""
    return {name: int(pid) for name, pid in re.findall(r"(\w+) \(pid (\d+)\)…", stdout)}


def group_alive(pgid: int) -> bool:
    """Whether any process is left in a process group (each child of ``parkway up`` leads its own)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(proc: subprocess.Popen[bytes] | forkserver.Forked, groups: list[int], *, grace: float = 20) -> None:
    """Stop a ``parkway`` process and everything it started, whatever state the test left them in:
    SIGINT first (it stops its children), then SIGKILL to its group and to each child's group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    for pgid in [proc.pid, *groups]:
        if pgid > 0:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with suppress(AssertionError):
        wait_for(lambda: not any(group_alive(g) for g in groups if g > 0), timeout=10, what="children gone")


@dataclass
class Up:
    """A ``parkway up`` started by a test, its stdout and stderr in files."""

    proc: subprocess.Popen[bytes] | forkserver.Forked
    home: Path
    out: Path
    err: Path
    env: dict[str, str]
    api: str
    flower: str
    groups: list[int] = field(default_factory=list)

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def logs(self) -> str:
        return f"stdout:\n{self.stdout()}\nstderr (last 4000 chars):\n{self.err.read_text(errors='replace')[-4000:]}"

    def printed(self, text: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"parkway up exited with {self.proc.returncode}\n{self.logs()}")
        return text in self.stdout()

    def stop(self) -> None:
        stop(self.proc, [*self.groups, *child_pids(self.stdout()).values()])


def start_up(
    tmp_path: Path,
    home: Path,
    *args: str,
    name: str = "up",
    imports: str | None = "tests.workflows",
    extra_env: dict[str, str] | None = None,
) -> Up:
    """``parkway up`` on the embedded defaults in ``home``, with the test workflows (``imports=None``: the
    default, the shipped examples) and ``extra_env``, on free ports."""
    env = embedded_env(PARKWAY_HOME=str(home), **({} if imports is None else {"PARKWAY_IMPORTS": imports}))
    env.update(extra_env or {})
    api_port, flower_port = free_port(), free_port()
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    cmd = ["up", "--port", str(api_port), "--flower-port", str(flower_port), "--concurrency", "1", "--grace", "30",
           *args]  # fmt: skip
    proc = launch(cmd, env=env, cwd=tmp_path, out=out, err=err)
    return Up(proc, home, out, err, env, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{flower_port}")


@contextmanager
def home_database(home: Path) -> Iterator[Connection]:
    """A connection (one transaction, committed at the end) to the embedded PostgreSQL of ``home``: started
    for the block if it is not running, and stopped after it if the block started it."""
    directory = embedded.data_dir(home)
    with embedded.running(directory):
        engine = create_engine(embedded.url(directory))
        try:
            with engine.begin() as conn:
                yield conn
        finally:
            engine.dispose()
