"""The probe's task, on whichever app the worker runs (``--include bench.overhead_tasks``): the bare
baseline's CAS (``bench.bare``'s statement, one psycopg connection per process), so a bare worker and a
Parkway worker run the same body and differ only in their app.

``OVERHEAD_OFF`` (comma-separated) takes pieces of Parkway's per-task machinery away in the worker, through
public APIs, to measure each: ``signals`` (task_prerun/postrun receivers), ``filter`` (the log context
filter), ``json`` (Celery's text format instead), ``info`` (no tracer INFO line: "Task … succeeded"),
``received`` (no "Task … received" INFO line in the worker's main process). ``overhead.cas_sqla`` is the
same statement through a minimal SQLAlchemy engine, as the bench's ``bench.cas`` runs it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import psycopg
from celery import shared_task, signals

CAS_SQL = "UPDATE bare_rows SET status = 'done' WHERE id = %s AND status = 'queued' RETURNING id"
OFF = {w for w in os.environ.get("OVERHEAD_OFF", "").split(",") if w}

_conn: dict[str, Any] = {"pid": None, "conn": None}


@shared_task(name="overhead.cas", ignore_result=True)
def cas(row_id: int) -> bool:
    if _conn["pid"] != os.getpid():
        _conn.update(pid=os.getpid(), conn=psycopg.connect(os.environ["OVERHEAD_DATABASE_URL"]))
    conn: psycopg.Connection[Any] = _conn["conn"]
    with conn.transaction():
        return conn.execute(CAS_SQL, (row_id,)).fetchone() is not None


_engine: dict[str, Any] = {"pid": None, "engine": None}


@shared_task(name="overhead.cas_sqla", ignore_result=True)
def cas_sqla(row_id: int) -> bool:
    from sqlalchemy import create_engine, text

    if _engine["pid"] != os.getpid():
        url = os.environ["OVERHEAD_DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1)
        _engine.update(pid=os.getpid(), engine=create_engine(url, pool_size=1, max_overflow=1))
    with _engine["engine"].begin() as conn:
        return conn.execute(text(CAS_SQL.replace("%s", ":id")), {"id": row_id}).first() is not None


if "signals" in OFF:
    for signal in (signals.task_prerun, signals.task_postrun):
        signal.receivers.clear()
if "info" in OFF:
    logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
if "received" in OFF:
    logging.getLogger("celery.worker.strategy").setLevel(logging.WARNING)


@signals.worker_process_init.connect
def _pieces_off(**_: Any) -> None:
    for handler in logging.getLogger().handlers:
        if "filter" in OFF:
            for f in list(handler.filters):
                handler.removeFilter(f)
        if "json" in OFF:
            handler.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"))
