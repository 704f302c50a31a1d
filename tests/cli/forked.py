"""``parkway`` commands, each a process of its own, forked from one server that imported their libraries once.

A test of what a command does (its exit code, what it prints, what it stores) runs it with ``Forks.parkway``:
a fresh process with the environment, working directory, stdout and stderr the test gives it, which runs
``parkway.cli`` as ``python -m parkway.cli`` does and exits with its code (``subprocess.CompletedProcess``, as
``subprocess.run`` returns). It is forked from a server (this module run as a script: its own interpreter, not
the test's) that imported the libraries and project modules the commands import (SQLAlchemy, psycopg, the
settings, the store) and nothing else: no workflow module, no settings read, no connection open. A new
interpreter importing those is most of a command's CPU; how long a command takes as a whole process is
measured by bench/cli_times.py and its imports checked by tests/unit/test_cli_imports.py, not here.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

# Not tests.support's: the server imports this module, and nothing of the suite's (its workflows, its settings).
ROOT = Path(__file__).resolve().parents[2]

# What the commands import, the costly part of each start: imported by the server once.
PRELOAD = (
    "argparse",
    "psycopg",
    "pydantic",
    "jsonschema",
    "sqlalchemy",
    "sqlalchemy.orm",
    "parkway.settings",
    "parkway.db",
    "parkway.pgconn",
    "parkway.migrate",
    "parkway.logs",
    "parkway.cli_grants",
    "models.tables",
    "models.access",
    "models.principals",
    "models.principal_sql",
    "models.run_start",
    "models.store",
    "tasks.registry",
    "tasks.sdk",
)


class Forks:
    """The server, started at once; ``close`` ends it (and it ends when the test process does)."""

    def __init__(self) -> None:
        self.files = Path(tempfile.mkdtemp(prefix="parkway-forks-"))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.forked"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, encoding="utf-8",
        )  # fmt: skip
        self.count, self.pending = 0, b""
        self._answer(timeout=120)  # its imports done

    def _answer(self, timeout: float) -> dict[str, Any] | None:
        """The server's next line, or ``None`` after ``timeout`` seconds (read unbuffered: a buffered reader
        would hold a line that came with the one before while the selector waits for more)."""
        stdout = self.server.stdout
        assert stdout is not None
        while b"\n" not in self.pending:
            with selectors.DefaultSelector() as selector:
                selector.register(stdout, selectors.EVENT_READ)
                if not selector.select(timeout):
                    return None
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"the fork server exited with {self.server.wait(timeout=10)}")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def parkway(
        self, *args: str, env: dict[str, str], cwd: Path, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``parkway *args`` in ``cwd`` with exactly ``env``; what it printed and its exit code."""
        self.count += 1
        out, err = self.files / f"{self.count}.out", self.files / f"{self.count}.err"
        out.touch()
        err.touch()
        request = {"argv": list(args), "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
        stdin = self.server.stdin
        assert stdin is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        started = self._answer(timeout=30)
        assert started is not None, "the fork server did not fork"
        done = self._answer(timeout)
        if done is None:
            with suppress(ProcessLookupError):
                os.kill(started["pid"], signal.SIGKILL)
            self._answer(timeout=10)
            raise subprocess.TimeoutExpired(["parkway", *args], timeout, out.read_text(), err.read_text())
        printed = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
        return subprocess.CompletedProcess(["parkway", *args], done["code"], *printed)

    def close(self) -> None:
        """End the server (its stdin closed, it returns) and remove what the commands printed."""
        for pipe in (self.server.stdin, self.server.stdout):
            if pipe is not None:
                pipe.close()
        with suppress(subprocess.TimeoutExpired):
            self.server.wait(timeout=10)
        self.server.kill()  # a no-op once it returned
        self.server.wait(timeout=10)
        shutil.rmtree(self.files, ignore_errors=True)


# --------------------------------------------------------------------------- the server


def _become(request: dict[str, Any]) -> int:
    """In the forked child: the command's process (its directory, environment, stdin, stdout, stderr, argv),
    running ``parkway.cli`` as ``python -m`` does; its exit code."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["out"], os.O_WRONLY),
                            (2, request["err"], os.O_WRONLY)):  # fmt: skip
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["parkway", *request["argv"]]
    sys.path[0] = request["cwd"]  # as ``python -m`` puts the current directory first
    try:
        runpy.run_module("parkway.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _exit_child(code: int, streams: tuple[IO[str], ...]) -> None:
    try:
        atexit._run_exitfuncs()  # what the command registered (an embedded PostgreSQL it started, to stop)
        for stream in streams:
            stream.flush()
    finally:
        os._exit(code)


def serve() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    answers = sys.stdout
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _become(request)
            finally:
                _exit_child(code, (sys.stdout, sys.stderr))
        print(json.dumps({"pid": pid}), file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), file=answers, flush=True)


if __name__ == "__main__":
    serve()
