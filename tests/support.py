"""Helpers for tests that drive real worker processes: start, SIGTERM, SIGKILL, wait for conditions."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import TextClause, select, text

from models import store
from models.tables import Continuation, Event, Interaction, Run
from parkway.children import QUEUES
from parkway.db import read_statement, transaction
from tests import forkserver
from tests.workflows import EFFECTS_DDL

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

AGENT, HUMAN, STRANGER, ADMIN = "bot", "ana", "eve", "boss"
TARGET = "team:ops"

# One client for every readiness probe: ``httpx.get`` makes a client (and loads a TLS context) per call,
# which, polled while a server starts, takes the CPU that the server needs to start.
PROBE = httpx.Client()


def unavailable(pg_url: str, redis_url: str | None = None) -> str | None:
    """Why PostgreSQL (or Redis, when given) cannot be reached, or ``None``."""
    from sqlalchemy import create_engine

    try:
        engine = create_engine(pg_url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return f"PostgreSQL at {pg_url}: {type(exc).__name__}: {exc}"
    if redis_url is None:
        return None
    try:
        import redis

        redis.Redis.from_url(redis_url, socket_timeout=3).ping()
    except Exception as exc:
        return f"Redis at {redis_url}: {type(exc).__name__}: {exc}"
    return None


def sweeps_done() -> int:
    """How many sweep passes this database has seen end, idle ones too (the sweep's totals count them: an idle
    pass logs nothing)."""
    from models.store.sweep import PASSES

    with transaction() as session:
        done = session.execute(text("SELECT total FROM sweep_totals WHERE category = :c"), {"c": PASSES})
        return int(done.scalar() or 0)


# How often ``wait_for`` polls: at first soon (most conditions hold within a moment), then less and less often,
# up to the cap. Each poll is a statement or more, or a request to an API server: at the first pace for the
# whole of a long wait, the suite's waiting test processes took CPU from the workers and servers they wait for.
POLL_S, POLL_CAP_S = 0.05, 0.25
# The suite's workers, beats, API servers and parkway commands are forked from a process with their
# libraries imported (tests/forkserver.py); PARKWAY_TEST_FORK=0 starts each as a fresh process instead.
FORK_WORKERS = os.environ.get("PARKWAY_TEST_FORK", "1") != "0"


def wait_for(condition: Callable[[], T], *, timeout: float = 30.0, sweep: bool = False, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; with ``sweep``, sweep between polls."""
    from beat.sweep import run_sweep

    deadline = time.monotonic() + timeout
    last_sweep = 0.0
    poll = POLL_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if sweep and time.monotonic() - last_sweep > 0.5:
            run_sweep()
            last_sweep = time.monotonic()
        time.sleep(poll)
        poll = min(poll * 1.5, POLL_CAP_S)


def read_stream(read: Callable[[int], tuple[list[T], int]], after: int, through: int, *, what: str) -> list[T]:
    """Everything a stream reader (``cursor -> (events, next cursor)``) gives from ``after`` until its cursor
    passes ``through``, polled as a client polls. One read may stop short of events final a moment ago: the
    bound of what is final is not monotonic between reads (a transaction of another database ending between
    a read's snapshot and its look at ``pg_stat_activity`` counts as this database's: models/horizon.py);
    only the cursor a client keeps is."""
    got: list[T] = []
    cursor = after

    def caught_up() -> bool:
        nonlocal cursor
        page, cursor = read(cursor)
        got.extend(page)
        return cursor >= through

    wait_for(caught_up, what=what)
    return got


def read_now(query: TextClause, **params: object) -> Any:
    """One value read in a statement of its own: a view such as ``pg_stat_activity`` is one snapshot for
    the whole of a transaction."""
    with read_statement() as conn:
        return conn.scalar(query, params)


# A backend of this test database whose statement waits for a lock (its pid), of the statement ``like``.
WAITING_ON_A_LOCK = text(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    " AND query LIKE :like"
)
BACKEND_STATE = text("SELECT state FROM pg_stat_activity WHERE pid = :pid")


@contextmanager
def settings_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[None]:
    """This process's settings read with ``env`` set, for the block; as they were after it."""
    from parkway.settings import reset_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    try:
        yield
    finally:
        monkeypatch.undo()
        reset_settings()


def child_env(database_url: str, **overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_CRASH_AT")}
    env["PARKWAY_DATABASE_URL"] = database_url
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass
class Worker:
    """A real ``celery worker`` subprocess in its own process group."""

    proc: subprocess.Popen[bytes] | forkserver.Forked
    log: Path
    name: str

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ready(self, timeout: float = 40.0) -> None:
        wait_for(
            lambda: "ready." in self.text() or self.proc.poll() is not None,
            timeout=timeout,
            what=f"worker {self.name} ready",
        )
        if self.proc.poll() is not None:
            raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM to the main process (warm shutdown, as a supervisor does). Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not stop on SIGTERM:\n{self.text()[-3000:]}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Stack:
    broker: str  # "redis" or "filesystem"
    database_url: str
    broker_url: str
    home: Path
    logs: Path
    workers: list[Worker] = field(default_factory=list)

    # ----------------------------------------------------------------- processes

    def start_worker(
        self,
        *,
        concurrency: int = 2,
        wait: bool = True,
        heartbeat: bool = False,
        queues: str = QUEUES,
        **env: str | None,
    ) -> Worker:
        """A real ``celery worker`` subprocess (prefork) consuming ``queues`` (all the named ones unless told:
        ``WORK_QUEUES`` and ``OUTBOUND_QUEUES`` are the worker's and the outbound worker's of ``parkway up``).
        ``heartbeat``: as ``parkway up`` runs it, with worker events on, so a monitor can turn task events on
        at run time."""
        name = f"w{len(self.workers)}-{uuid.uuid4().hex[:6]}"
        worker = self._spawn(
            name,
            ["worker", "-l", "info", "-P", "prefork", "-c", str(concurrency), "-n", f"{name}@%h",
             "-Q", queues,
             "--without-gossip", "--without-mingle", *([] if heartbeat else ["--without-heartbeat"])],
            env,
        )  # fmt: skip
        if wait:
            worker.wait_ready()
        return worker

    def start_beat(self, *, wait: bool = True, **env: str | None) -> Worker:
        """A real ``celery beat`` subprocess sending the sweep on its cadence (``wait``: once it sent one). Its
        "Sending due task" lines are DEBUG lines (an idle stack logs nothing of its sweeps): it logs at DEBUG."""
        name = f"beat{len(self.workers)}-{uuid.uuid4().hex[:6]}"
        beat = self._spawn(name, ["beat", "-l", "debug", "-s", str(self.logs / f"{name}.schedule")], env)
        if wait:
            wait_for(lambda: "Sending due task" in beat.text() or not beat.alive(), timeout=60, what="beat sending")
        return beat

    def _spawn(self, name: str, args: list[str], env: dict[str, str | None]) -> Worker:
        log = self.logs / f"{name}.log"
        # celery's own command, as parkway up starts it: less the subcommands it does not run (parkway/cli_celery.py)
        args = ["-A", "tasks.celery_app:app", *args]
        full_env = child_env(self.database_url, **env)
        proc: subprocess.Popen[bytes] | forkserver.Forked
        if FORK_WORKERS and "LD_PRELOAD" not in full_env:  # a preloaded library needs a process of its own
            proc = forkserver.spawn("parkway.cli_celery", args, env=full_env, cwd=ROOT, log=log)
        else:
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "parkway.cli_celery", *args], cwd=ROOT, env=full_env, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
        process = Worker(proc=proc, log=log, name=name)
        self.workers.append(process)
        return process

    def run_python(self, code: str, *, timeout: float = 60.0, **env: str | None) -> subprocess.CompletedProcess[str]:
        """Run Python in a fresh process against this stack (for crash points in the answering process)."""
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=child_env(self.database_url, **env),
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def parkway(self, *args: str, timeout: float = 60.0, **env: str | None) -> subprocess.CompletedProcess[str]:
        full_env = child_env(self.database_url, **env)
        if FORK_WORKERS:
            return forkserver.run("parkway.cli", list(args), env=full_env, cwd=ROOT, timeout=timeout)
        return subprocess.run(
            [sys.executable, "-m", "parkway.cli", *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.kill()

    # ----------------------------------------------------------------- broker

    def flush_broker(self) -> None:
        """Lose every queued message (Redis FLUSHDB, or empty the filesystem broker's folder)."""
        if self.broker == "redis":
            import redis

            redis.Redis.from_url(self.broker_url).flushdb()
        else:
            folder = self.home / "broker" / "queue"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            # Bindings of dead workers' pidbox and event queues would otherwise collect broadcasts forever.
            control = self.home / "broker" / "control"
            shutil.rmtree(control, ignore_errors=True)
            control.mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- data

    def setup_actors(self) -> None:
        with transaction() as session:
            session.execute(text(EFFECTS_DDL))
            for kind, name in (("agent", AGENT), ("human", HUMAN), ("human", STRANGER), ("admin", ADMIN)):
                if store.principal_by_name(session, name) is None:
                    store.create_principal(session, kind=kind, name=name, token_hash=None)
            for name in (AGENT, HUMAN):
                principal = store.principal_by_name(session, name)
                assert principal is not None
                store.create_grant(session, principal_id=principal.id, target=TARGET)


def effects(run_id: str, tag: str | None = None) -> int:
    with transaction() as session:
        sql = "SELECT COUNT(*) FROM test_effects WHERE run_id = :r" + (" AND tag = :t" if tag else "")
        return int(session.execute(text(sql), {"r": run_id, "t": tag}).scalar_one())


def run_row(run_id: str) -> Run:
    from sqlalchemy.orm import undefer

    with transaction() as session:  # ``projection_pending`` is derived (0028), read where asked for
        return session.get_one(Run, run_id, options=[undefer(Run.projection_pending)])


def run_status(run_id: str) -> str:
    return run_row(run_id).status


def interactions(run_id: str) -> dict[str, Interaction]:
    with transaction() as session:
        rows = session.scalars(select(Interaction).where(Interaction.run_id == run_id)).all()
        return {i.key: i for i in rows}


def continuations(run_id: str) -> list[Continuation]:
    with transaction() as session:
        return list(
            session.scalars(select(Continuation).where(Continuation.run_id == run_id).order_by(Continuation.created_at))
        )


def event_types(run_id: str) -> list[str]:
    with transaction() as session:
        return list(session.scalars(select(Event.type).where(Event.run_id == run_id).order_by(Event.seq)))


def wait_parked(run_id: str, *, timeout: float = 30.0, sweep: bool = True) -> dict[str, Interaction]:
    wait_for(lambda: run_status(run_id) == "waiting", timeout=timeout, sweep=sweep, what=f"run {run_id} waiting")
    return interactions(run_id)


def wait_status(run_id: str, status: str, *, timeout: float = 40.0, sweep: bool = True) -> Run:
    wait_for(lambda: run_status(run_id) == status, timeout=timeout, sweep=sweep, what=f"run {run_id} {status}")
    return run_row(run_id)


def new_response_id() -> str:
    return uuid.uuid4().hex


def start(workflow: str, payload: Any = None, **kwargs: Any) -> str:
    from tasks.sdk import start_run

    return start_run(workflow, payload if payload is not None else {}, principal=AGENT, target=TARGET, **kwargs)


def pass_time(seconds: float) -> None:
    """As though ``seconds`` of the database's clock passed, for what the sweep judges by it: every live
    continuation's publish time and lease, every pending question's expiry, creation and
    team timers (reminders, escalation), and every worker's heartbeat and advertisement, and each fleet's
    presence, move back that much (a worker not heard from since is dead)."""
    delta = timedelta(seconds=seconds)
    with transaction() as session:
        back = {"s": seconds}
        session.execute(text("UPDATE workers SET heartbeat_at = heartbeat_at - make_interval(secs => :s), "
                             "expires_at = expires_at - make_interval(secs => :s)"), back)  # fmt: skip
        session.execute(text("UPDATE advertised_versions SET last_seen_at = last_seen_at - make_interval(secs => :s)"),
                        back)  # fmt: skip
        session.execute(text("UPDATE fleet_presence SET up_since = up_since - make_interval(secs => :s), "
                             "seen_until = seen_until - make_interval(secs => :s)"), back)  # fmt: skip
        session.execute(text("UPDATE interactions SET created_at = created_at - make_interval(secs => :s), "
                             "remind_at = remind_at - make_interval(secs => :s), "
                             "escalate_at = escalate_at - make_interval(secs => :s) WHERE status = 'pending'"),
                        back)  # fmt: skip
        for c in session.scalars(select(Continuation).where(Continuation.status.in_(["ready", "claimed"]))):
            c.enqueued_at = c.enqueued_at - delta if c.enqueued_at else None
            c.lease_expires_at = c.lease_expires_at - delta if c.lease_expires_at else None
        for i in session.scalars(select(Interaction).where(Interaction.status == "pending")):
            i.expires_at = i.expires_at - delta if i.expires_at else None
