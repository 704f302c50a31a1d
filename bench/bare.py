"""The honest baseline: a minimal Celery app that imports nothing of Parkway.

Same broker, same worker command line (prefork ``-c 2``), prefetch 1, ``acks_late``, and one task doing the
compare-and-set every exactly-once consume needs at least: ``UPDATE … WHERE status = 'queued' RETURNING``
on PostgreSQL, committed. Its worker is ``celery -A bench.bare:app worker``; the environment names the
broker (``BENCH_BARE_BROKER_URL``) and the database (``BENCH_BARE_DATABASE_URL``, a libpq URL).
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
TABLE_DDL = "CREATE TABLE IF NOT EXISTS bare_rows (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, started FLOAT8)"
CAS_SQL = "UPDATE bare_rows SET status = 'done' WHERE id = %s AND status = 'queued' RETURNING id"
CAS_LAT_SQL = "UPDATE bare_rows SET status = 'done', started = %s WHERE id = %s AND status = 'queued' RETURNING id"

app = Celery("bare", broker=os.environ.get("BENCH_BARE_BROKER_URL", "redis://127.0.0.1:6379/13"))
# Parkway's delivery settings (tasks.celery_app), restated: the baseline must import nothing of Parkway.
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    result_backend=None,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
)

_conn: dict[str, Any] = {"pid": None, "conn": None}


def connection() -> psycopg.Connection[Any]:
    """One connection per process, opened again after fork (never shared across a fork)."""
    if _conn["pid"] != os.getpid():
        _conn.update(pid=os.getpid(), conn=psycopg.connect(os.environ["BENCH_BARE_DATABASE_URL"]))
    conn: psycopg.Connection[Any] = _conn["conn"]
    return conn


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
