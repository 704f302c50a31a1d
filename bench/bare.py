"""The honest baseline: a minimal Celery app that imports nothing of Parkway.

Same broker, same worker command line (prefork ``-c 2``), prefetch 1, ``acks_late``, and one task doing the
compare-and-set every exactly-once consume needs at least: ``UPDATE … WHERE status = 'queued' RETURNING``
on PostgreSQL, committed. Beside it, the durable floor (``bench.floor``): the fewest writes any durable
answer → resume makes, still with none of Parkway (``bare.resume``). Its worker is ``celery -A
bench.bare:app worker``; the environment names the broker (``BENCH_BARE_BROKER_URL``) and the database
(``BENCH_BARE_DATABASE_URL``, a libpq URL).
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
from celery import Celery

QUEUE = "bare"
CAS = "bare.cas"
CAS_LAT = "bare.cas_lat"
RESUME = "bare.resume"
TABLE_DDL = "CREATE TABLE IF NOT EXISTS bare_rows (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, started FLOAT8)"
CAS_SQL = "UPDATE bare_rows SET status = 'done' WHERE id = %s AND status = 'queued' RETURNING id"
CAS_LAT_SQL = "UPDATE bare_rows SET status = 'done', started = %s WHERE id = %s AND status = 'queued' RETURNING id"
# The durable floor: a wait answered by one durable compare-and-set, claimed under a lease by one more (not
# flushed: a lost claim is claimed again), consumed by a third (durable), each in autocommit.
WAIT_DDL = (
    "CREATE TABLE IF NOT EXISTS bare_waits (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, value JSONB, "
    "lease_until TIMESTAMPTZ)"
)
ANSWER_SQL = "UPDATE bare_waits SET status = 'answered', value = %s WHERE id = %s AND status = 'waiting' RETURNING id"
CLAIM_SQL = (
    "UPDATE bare_waits SET status = 'claimed', lease_until = now() + interval '30 seconds' "
    "WHERE id = %s AND status = 'answered' RETURNING value"
)
CONSUME_SQL = (
    "UPDATE bare_waits SET status = 'done', lease_until = NULL WHERE id = %s AND status = 'claimed' RETURNING id"
)

app = Celery("bare", broker=os.environ.get("BENCH_BARE_BROKER_URL", "redis://127.0.0.1:6379/13"))
# Parkway's delivery settings (tasks.celery_app), restated: the baseline must import nothing of Parkway
# (the ladder's app, bench.ladder_app, takes them from here).
DELIVERY: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,
    "task_ignore_result": True,
    "result_backend": None,
    "task_serializer": "json",
    "accept_content": ["json"],
    "worker_hijack_root_logger": False,
}
app.conf.update(DELIVERY, task_default_queue=QUEUE)

_conns: dict[tuple[int, str], psycopg.Connection[Any]] = {}
_KINDS = {
    "transactions": {},
    "autocommit": {"autocommit": True},
    "unflushed": {"autocommit": True, "options": "-c synchronous_commit=off"},
}


def connection(kind: str = "transactions") -> psycopg.Connection[Any]:
    """One connection of each kind per process, opened again after fork (never shared across a fork)."""
    key = (os.getpid(), kind)
    if key not in _conns:
        _conns[key] = psycopg.connect(os.environ["BENCH_BARE_DATABASE_URL"], **_KINDS[kind])
    return _conns[key]


@app.task(name=CAS, ignore_result=True)
def cas(row_id: int) -> bool:
    conn = connection()
    with conn.transaction():
        return conn.execute(CAS_SQL, (row_id,)).fetchone() is not None


@app.task(name=CAS_LAT, ignore_result=True)
def cas_lat(row_id: int) -> bool:
    """The latency baseline: the body's start time goes into the row it sets."""
    started = time.time()
    conn = connection()
    with conn.transaction():
        return conn.execute(CAS_LAT_SQL, (started, row_id)).fetchone() is not None


@app.task(name=RESUME, ignore_result=True)
def resume(row_id: int) -> bool:
    """The durable floor's continuation: claim the answered wait, read its value, consume it."""
    claimed = connection("unflushed").execute(CLAIM_SQL, (row_id,)).fetchone()
    if claimed is None:
        return False
    return connection("autocommit").execute(CONSUME_SQL, (row_id,)).fetchone() is not None
