"""The suite's worker and beat processes, forked from a process that has already imported the libraries every
one of them imports (SQLAlchemy, psycopg, Celery, kombu, pydantic): most of a ``celery worker`` start's CPU
was those imports, paid again by each of the suite's worker starts.

Each child is still a real ``celery`` process running celery's own command line (``parkway.cli_celery``) in
a session of its own, with its own environment, working directory and log, killed by the tests with real
signals; only the libraries above and Parkway's models and API modules (``PRELOAD_PACKAGES``, which read no
setting as they are imported) come already imported. Nothing that reads a setting is imported before the
fork, so every setting a child reads from its environment is read after it, as in a fresh process. The
suite's ``parkway`` commands are forked the same way. One server per pytest process, started on first use;
``spawn`` returns a ``Forked``, which answers as ``subprocess.Popen`` does for what the suite asks of its
workers (``pid``, ``poll``, ``wait``, ``returncode``, signals).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import pkgutil
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PRELOAD = ("sqlalchemy.orm", "sqlalchemy.dialects.postgresql.psycopg", "psycopg", "pydantic", "kombu", "celery",
           "celery.app.base", "celery.worker", "celery.apps.worker", "celery.concurrency.prefork", "billiard",
           "redis", "fastapi", "starlette.applications", "uvicorn.main", "httpx", "jsonschema", "jinja2",
           "prometheus_client",
           # celery's subcommands, as ``parkway.cli_celery`` imports them (``celery.bin.base`` builds its
           # pygments lexer as it loads); not ``celery.bin.celery`` itself, which reads the plugged-in ones, nor
           # ``amqp``, whose REPL cli_celery leaves out
           "celery.bin.base", "celery.bin.beat", "celery.bin.worker", "celery.bin.call", "celery.bin.control",
           "celery.bin.events", "celery.bin.graph", "celery.bin.list", "celery.bin.logtool", "celery.bin.migrate",
           "celery.bin.multi", "celery.bin.purge", "celery.bin.result", "celery.bin.shell",
           "celery.bin.upgrade")  # fmt: skip
# Parkway's models (tables, the store, the reads: every process of ours imports them) and the API's modules,
# with the kernel modules they import, and the ORM's mappers configured. They read no setting and no
# environment variable as they are imported (``_preload`` checks that the settings were never read): whatever
# a child reads, it reads after the fork, as in a fresh process. What does read them at import (the Celery
# app and what imports it: ``tasks``, ``beat``, the workflows, and the modules below) is left to each child.
PRELOAD_PACKAGES = ("models", "api")
NOT_PRELOADED = frozenset({"api.app", "api.routes.webhooks", "api.routes.worker_protocol"})


class Forked:
    """A child of the fork server, as the suite uses a ``subprocess.Popen``."""

    def __init__(self, server: _Server, pid: int) -> None:
        self._server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.ask({"op": "status", "pid": self.pid})["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Server:
    """The client's end of one fork server (a Unix socket, one JSON line each way per request)."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="parkway-fork-")) / "socket"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        # Not the pytest process's stdin and stdout: under xdist they are its channel to the controller.
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", str(self.path)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit {self.proc.poll()})")
            time.sleep(0.02)
        atexit.register(self.close)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(self.path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = b"".join(iter(lambda: conn.recv(65536), b""))
        answer: dict[str, Any] = json.loads(reply)
        if "error" in answer:
            raise RuntimeError(f"fork server: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


_server: _Server | None = None


def spawn(
    module: str,
    args: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log: Path,
    append: bool = False,
    err: Path | None = None,
    at_exit: bool = False,
) -> Forked:
    """``python -m module *args`` as a child of the fork server, in its own session, stdout and stderr to ``log``
    (after what it holds, with ``append``; stderr to ``err`` when given). ``at_exit``: the child ends as the
    interpreter does, running its exit handlers (``atexit``: an embedded PostgreSQL a command started is
    stopped as it exits), not at once."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    for path in (log, err):  # there once this returns, as a Popen's redirected files are: the child opens them later
        if path is not None:
            path.touch()
    request = {"op": "spawn", "module": module, "args": args, "env": env, "cwd": str(cwd), "log": str(log),
               "append": append, "err": None if err is None else str(err), "at_exit": at_exit}  # fmt: skip
    return Forked(_server, _server.ask(request)["pid"])


def run(
    module: str, args: list[str], *, env: dict[str, str], cwd: Path, timeout: float, at_exit: bool = False
) -> subprocess.CompletedProcess[str]:
    """As ``subprocess.run([python, "-m", module, *args], capture_output=True, text=True, timeout=...)``."""
    with tempfile.TemporaryDirectory(prefix="parkway-run-") as folder:
        out, err = Path(folder) / "out", Path(folder) / "err"
        child = spawn(module, args, env=env, cwd=cwd, log=out, err=err, at_exit=at_exit)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise subprocess.TimeoutExpired([module, *args], timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess([module, *args], code, out.read_text(), err.read_text())


# --------------------------------------------------------------------------- the server's side


def _run_child(request: dict[str, Any]) -> None:
    """In the forked child: become the requested ``python -m`` process; never returns (with ``at_exit``, it
    leaves by ``SystemExit`` through the server's loop, so the interpreter exits as a fresh process's does)."""
    code = 1
    try:
        code = _child(request)
    finally:
        if not request["at_exit"]:
            os._exit(code)  # whatever happened: a child never goes back to the server's loop
    raise SystemExit(code)


def _child(request: dict[str, Any]) -> int:
    """Run the requested module as ``__main__``: its exit code."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own, not a fresh process's
        random.seed()  # not the server's sequence, shared by every child
        os.setsid()
        mode = os.O_APPEND if request["append"] else os.O_TRUNC
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | mode, 0o644)
        os.dup2(log, 1)
        os.dup2(os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if request["err"] else log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # PYTHONUNBUFFERED and PYTHONIOENCODING, as a start reads them
        encoding, _, errors = request["env"].get("PYTHONIOENCODING", "").partition(":")
        text = {"encoding": encoding or None, "errors": errors or None}
        sys.stdout.reconfigure(write_through=True, **text)  # type: ignore[union-attr]
        sys.stderr.reconfigure(write_through=True, **text)  # type: ignore[union-attr]
        sys.argv = [request["module"], *request["args"]]
        sys.path.insert(0, request["cwd"])  # as ``python -m`` puts the current directory first
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if exit_.code is not None and not isinstance(exit_.code, int):
            print(exit_.code, file=sys.stderr)  # as the interpreter prints a message it exits with
    except BaseException:  # a crash is the log's business, as in a fresh process
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name not in NOT_PRELOADED:
                importlib.import_module(module.name)
    from sqlalchemy.orm import configure_mappers

    from parkway.settings import get_settings

    configure_mappers()
    if get_settings.cache_info().currsize or "tasks.celery_app" in sys.modules:
        # a setting read here would be this server's, not each child's
        raise RuntimeError(f"importing {PRELOAD_PACKAGES} read the settings: name the module in NOT_PRELOADED")
    # What is loaded so far lives as long as each child: out of the collector's sight, a child's collections
    # (billiard's before each pool process it forks, the interpreter's own) no longer walk all of it again.
    gc.freeze()


def _serve(path: Path) -> None:
    _preload()
    statuses: dict[int, int] = {}
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path) + ".tmp")
    os.rename(str(path) + ".tmp", path)  # the client waits for the name: it exists once we listen
    listener.listen(64)
    while True:
        readable, _, _ = select.select([listener], [], [], 0.1)
        _reap(statuses)
        if not readable:
            continue
        conn, _ = listener.accept()
        with conn:
            request = json.loads(conn.makefile("rb").readline())
            if request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _run_child(request)
                reply: dict[str, Any] = {"pid": pid}
            else:
                _reap(statuses)
                reply = {"status": statuses.get(request["pid"])}
            conn.sendall(json.dumps(reply).encode())


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _serve(Path(sys.argv[1]))
