"""What the bench runs in real worker processes (imported through ``PARKWAY_IMPORTS=bench.workflows``).

- ``bench.ask`` parks on one question; ``bench.done@1`` completes the run. In latency mode (snapshot
  ``{"lat": true}``) the continuation records when its body started and when its commit happened.
- ``bench.cas`` / ``bench.cas_lat`` are the baseline: a bare Celery task on the same app, broker, queue and
  worker settings (acks_late, prefetch 1) doing one ``UPDATE … WHERE status = 'queued' RETURNING`` on
  PostgreSQL through its own minimal engine (no pre-ping, one pooled connection per process).

Timestamps are ``time.time()`` on one machine, so the producer and the workers share a clock.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from sqlalchemy import Engine, create_engine, text

from parkway.db import connect_args, normalize_url, pool_options
from parkway.settings import get_settings
from tasks.celery_app import CONTINUATIONS_QUEUE, app
from tasks.sdk import Complete, Context, Park, Question, continuation, step

TARGET = "team:bench"
ASK = "bench.ask"
DONE = "bench.done@1"
CAS = "bench.cas"
CAS_LAT = "bench.cas_lat"
QUEUE = CONTINUATIONS_QUEUE  # the baseline travels the same queue as parkway.resume_step
COMMIT_KEY = "bench:commit"  # Redis list of "<kind>:<id> <time>" written right after a commit

BENCH_DDL = (
    "CREATE TABLE IF NOT EXISTS bench_rows ("
    " id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, started DOUBLE PRECISION)",
)


# --------------------------------------------------------------------------- the Parkway side


@step(ASK)
def ask(ctx: Context, payload: dict[str, Any]) -> Park:
    return Park(
        continuation=DONE,
        snapshot=payload,
        interactions=[Question(key="go", prompt="Go?", schema={"type": "string"}, target=TARGET)],
    )


# Latency steps this process has started and not yet committed (the worker's ``_committed`` reports them).
_latency_steps: set[str] = set()


@continuation("bench.done", version=1)
def done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    if snapshot and snapshot.get("lat"):
        # Its start goes to Redis from the body, its commit from right after the worker's commit (see
        # ``_report_latency_commits``): nothing of the measurement runs inside the commit, so the step ends
        # the way every plain step does (one statement), as in the throughput case.
        push_commit(f"s:{ctx.step_id}")
        _latency_steps.add(ctx.step_id)
    return Complete(result={"go": answers["go"].value})


# --------------------------------------------------------------------------- commit timestamps

_local: dict[str, Any] = {"pid": None, "redis": None}
_lock = threading.Lock()


def _redis() -> Any:
    import redis

    with _lock:
        if _local["pid"] != os.getpid():
            _local.update(pid=os.getpid(), redis=redis.Redis.from_url(get_settings().effective_broker_url))
        return _local["redis"]


def push_commit(tag: str) -> None:
    _redis().rpush(COMMIT_KEY, f"{tag} {time.time():.6f}")


def _report_latency_commits() -> None:
    """In the worker: push the commit time of a latency step right after its consume committed (the
    store's ``commit_outcome`` returns then, before the executor publishes or projects anything)."""
    import models.store

    original = models.store.commit_outcome

    def committed(claim: Any, outcome: Any, **kwargs: Any) -> Any:
        done = original(claim, outcome, **kwargs)
        if done is not None and claim.step.id in _latency_steps:
            _latency_steps.discard(claim.step.id)
            push_commit(f"p:{claim.step.id}")
        return done

    models.store.commit_outcome = committed  # type: ignore[assignment]


_report_latency_commits()


# --------------------------------------------------------------------------- the baseline

_engine: dict[str, Any] = {"pid": None, "engine": None}

CAS_SQL = text("UPDATE bench_rows SET status = 'done' WHERE id = :id AND status = 'queued' RETURNING id")
CAS_LAT_SQL = text(
    "UPDATE bench_rows SET status = 'done', started = :t WHERE id = :id AND status = 'queued' RETURNING id"
)


def bare_engine() -> Engine:
    """One minimal engine per process (made again after fork): no pre-ping, one pooled connection."""
    if _engine["pid"] != os.getpid():
        url = normalize_url(get_settings().effective_database_url)
        _engine.update(pid=os.getpid(), engine=create_engine(url, pool_size=1, max_overflow=1))
    engine: Engine = _engine["engine"]
    return engine


@app.task(name=CAS, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def cas(row_id: int) -> bool:
    """The minimum an exactly-once consume costs: one compare-and-set, committed."""
    with bare_engine().begin() as conn:
        return conn.execute(CAS_SQL, {"id": row_id}).first() is not None


@app.task(name=CAS_LAT, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def cas_lat(row_id: int) -> bool:
    """The baseline for latency: records its start time in the CAS row and its commit time in Redis."""
    started = time.time()
    with bare_engine().begin() as conn:
        won = conn.execute(CAS_LAT_SQL, {"id": row_id, "t": started}).first() is not None
    push_commit(f"b:{row_id}")
    return won


# --------------------------------------------------------------------------- what-if experiments

# ``--what-if a,b`` (env BENCH_WHAT_IF) changes Parkway in the bench's processes only, to measure what a
# proposed change would buy before anyone makes it. Results are labelled; never use them as Parkway's.
WHAT_IF = frozenset(x.strip() for x in os.environ.get("BENCH_WHAT_IF", "").split(",") if x.strip())
KNOWN_WHAT_IF = {
    "no-pre-ping": "engine without the idle-connection ping (parkway.db._ping_when_idle) at checkout",
    "no-inline-projection": "the worker leaves terminal projections to the sweep (no projector thread)",
    "no-erase-secrets": "skip the secret-erasing UPDATEs (what skipping them without sensitive fields saves)",
    "no-projection-fsync": "the projector writes run_metadata.json without its two fsync calls",
    "no-foreign-keys": "the bench database without its foreign keys (each insert's referential checks)",
    "no-event-rows": "the bench database discards every event row (a trigger): what the rows cost PostgreSQL",
    "tracing": "throughput beside itself with the workers tracing every span to a local OTLP/HTTP sink (issue 44)",
    "answer-autocommit": "the answer's two statements each in autocommit, without BEGIN and COMMIT (what a "
    "pending-interactions counter on the step would allow; safe here only because every bench step waits on one "
    "question)",
}


class _NoFsync:
    """``os`` as ``tasks.projection_files`` sees it, with ``fsync`` a no-op."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def fsync(_fd: int) -> None:
        return None


def _apply_what_if() -> None:
    unknown = WHAT_IF - set(KNOWN_WHAT_IF)
    if unknown:
        raise RuntimeError(f"unknown BENCH_WHAT_IF: {', '.join(sorted(unknown))}")
    if "no-pre-ping" in WHAT_IF:
        import parkway.db

        original = parkway.db.make_engine

        def make_engine(url: str, *, durable: bool = True) -> Engine:
            url = normalize_url(url)
            if not url.startswith("postgresql"):
                return original(url, durable=durable)
            return create_engine(url, pool_pre_ping=False, connect_args=connect_args(durable=durable), **pool_options())

        parkway.db.make_engine = make_engine
        parkway.db.reset_engine()
    if "no-erase-secrets" in WHAT_IF:
        import models.store

        models.store.erase_secrets = lambda session, **_: 0  # type: ignore[assignment]
    if "no-projection-fsync" in WHAT_IF:
        import tasks.projection_files

        tasks.projection_files.os = _NoFsync()  # type: ignore[assignment]
    if "answer-autocommit" in WHAT_IF:
        import tasks.sdk
        from parkway.db import read_statement

        tasks.sdk.core_transaction = read_statement  # type: ignore[assignment]
    if "no-inline-projection" in WHAT_IF:
        import tasks.worker

        tasks.worker.project_soon = lambda record: None  # type: ignore[assignment]


_apply_what_if()
