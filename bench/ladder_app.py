"""The ladder's worker (``bench.ladder``): a tiny Celery app with ``bench.bare``'s delivery settings and one
task, the continuation of a rung's wait (claim it, consume it, and from L5 on project the ended run durably).

Imports nothing of Parkway (nor of the bench's Parkway-facing modules). Worker: ``celery -A
bench.ladder_app:app worker``; the environment names the broker (``BENCH_LADDER_BROKER_URL``), the database
(``BENCH_LADDER_DATABASE_URL``, a libpq URL) and the projections' directory (``BENCH_LADDER_DIR``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
from celery import Celery

from bench import ladder_sql
from bench.bare import DELIVERY

QUEUE = "ladder"
RESUME = "ladder.resume"
PROJECTS_FROM = 5  # the rung that adds the durable terminal projection

app = Celery("ladder", broker=os.environ.get("BENCH_LADDER_BROKER_URL", "redis://127.0.0.1:6379/13"))
app.conf.update(DELIVERY, task_default_queue=QUEUE)  # bench.bare's: Parkway's delivery settings, restated

_conns: dict[tuple[int, bool], psycopg.Connection[Any]] = {}
CLAIM = {k: ladder_sql.claim(k) for k in ladder_sql.RUNGS}
CONSUME = {k: ladder_sql.consume(k) for k in ladder_sql.RUNGS}
RESULT = json.dumps({"value": "yes"})


def connection(unflushed: bool) -> psycopg.Connection[Any]:
    """Autocommit connections, one per process and kind (the claim's unflushed), opened again after fork."""
    key = (os.getpid(), unflushed)
    if key not in _conns:
        extra = {"options": "-c synchronous_commit=off"} if unflushed else {}
        _conns[key] = psycopg.connect(os.environ["BENCH_LADDER_DATABASE_URL"], autocommit=True, **extra)
    return _conns[key]


def project(directory: str, run_id: int, status: str, completed_at: Any, execution: str) -> None:
    """``<directory>/<run_id>/run_metadata.json``, all or nothing and durable: a temp file written and synced,
    renamed, its directory synced, and the directory's parent (the run's directory is new)."""
    run_dir = os.path.join(directory, str(run_id))
    os.makedirs(run_dir, exist_ok=True)
    record = {
        "run_id": str(run_id),
        "status": status,
        "completed_at": completed_at.isoformat(),
        "execution_id": execution,
        "warnings": [],
    }
    tmp, path = os.path.join(run_dir, f".run_metadata.{os.getpid()}.tmp"), os.path.join(run_dir, "run_metadata.json")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(record, indent=2).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for synced in (run_dir, directory):
        dir_fd = os.open(synced, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@app.task(name=RESUME, ignore_result=True, bind=True)
def resume(self: Any, rung: int, wait_id: int) -> bool:
    """Claim the answered wait's continuation (unflushed), read its value, consume it (durable)."""
    if connection(True).execute(CLAIM[rung], {"id": wait_id}).fetchone() is None:
        return False
    execution = str(self.request.id)
    params = {"id": wait_id, "execution": execution, "result": RESULT}
    ended = connection(False).execute(CONSUME[rung], params).fetchone()
    if ended is None:
        return False
    if rung >= PROJECTS_FROM:
        project(os.environ["BENCH_LADDER_DIR"], int(ended[0]), str(ended[1]), ended[2], execution)
    return True
