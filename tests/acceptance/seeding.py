"""What a test starts from, made cheaply where making it is not what the test is about: runs as ``start()``
leaves them, made many at once by the store's own statement (not a transaction and a publish each), a
database the tests of a module share, put back after each as a clone of its own would be (not a database
made and dropped each), and a worker they share (not a process start, its imports and Celery's own, each).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text, update

from models import store
from models.base import Base
from models.clock import db_now
from models.run_start import run_params
from models.store import runs
from models.tables import Continuation
from parkway.db import transaction
from tasks.sdk import request_digest
from tests.support import AGENT, TARGET, Stack, Worker


def started_runs(count: int, workflow: str, payload: Any = None) -> list[tuple[str, str]]:
    """``count`` runs of ``workflow`` as ``start()`` leaves them once its publish is lost: ``(run id, its start
    continuation's id)`` each. The store's own run creation (``CREATE_UNPUBLISHED_RUN``, the statement
    ``parkway run start`` runs) with the parameters ``start()`` gives it, all of them in one pipelined
    ``executemany``, then each continuation stamped as ``start()``'s publish stamps it (published once, now on
    the database's clock), in one transaction. A seeded run's ``shape`` is a started one's."""
    payload = payload if payload is not None else {}
    digest = request_digest(workflow, payload, TARGET)
    with transaction() as session:
        owner = store.principal_by_name(session, AGENT)
        assert owner is not None
        given = {"owner_id": owner.id, "owner_name": owner.name, "target": TARGET, "idempotency_key": None}
        made = [
            run_params(workflow=workflow, payload=payload, digest=digest, start=True, **given) for _ in range(count)
        ]
        session.connection().execute(runs.CREATE_UNPUBLISHED_RUN, made)
        ids = [p["cid"] for p in made]
        session.execute(update(Continuation).where(Continuation.id.in_(ids)).values(publishes=1, enqueued_at=db_now()))
    return [(p["id"], p["cid"]) for p in made]


# A run's rows, by table: the column that names the run.
RUN_ROWS = {"runs": "id", "steps": "run_id", "continuations": "run_id", "events": "run_id"}
LEFT_OUT = {"events": {"seq", "batch_seq"}}  # the event log's positions


def shape(run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of a run (the run, its steps, continuations and events), every column but the event log's
    positions, its ids named by what they are and its times left out: two runs made the same way are equal."""
    with transaction() as session:
        rows = {table: [dict(r) for r in session.execute(text(f"SELECT * FROM {table} WHERE {column} = :r"),
                                                           {"r": run_id}).mappings()]
                for table, column in RUN_ROWS.items()}  # fmt: skip
    names = {run_id: "<run>"}
    for table in ("steps", "continuations"):
        names.update({row["id"]: f"<{table} {n}>" for n, row in enumerate(rows[table])})

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, datetime):
            return "<time>"
        return names.get(value, value) if isinstance(value, str) else value

    return {table: [{k: plain(v) for k, v in row.items() if k not in LEFT_OUT.get(table, ())} for row in table_rows]
            for table, table_rows in rows.items()}  # fmt: skip


TABLES = "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = :schema"


def keep_rows() -> None:
    """A copy of every table of the current database that has rows, in the schema ``kept``, for
    ``put_back_rows``: a database a module's tests share, as each test would find a clone of its own."""
    with transaction() as session:
        session.execute(text("CREATE SCHEMA kept"))
        for table in session.scalars(text(TABLES), {"schema": "public"}).all():
            if session.scalar(text(f"SELECT EXISTS (SELECT FROM public.{table})")):
                session.execute(text(f"CREATE TABLE kept.{table} AS TABLE public.{table}"))


def put_back_rows() -> None:
    """The current database as ``keep_rows`` found it: every table emptied and its sequences restarted, the
    kept rows inserted again (the models' tables each after those its foreign keys name)."""
    order = [table.name for table in Base.metadata.sorted_tables]
    with transaction() as session:
        public = session.scalars(text(TABLES), {"schema": "public"}).all()
        session.execute(text(f"TRUNCATE {', '.join(f'public.{t}' for t in public)} RESTART IDENTITY"))
        kept = set(session.scalars(text(TABLES), {"schema": "kept"}).all())
        for table in [t for t in order if t in kept] + sorted(kept - set(order)):
            session.execute(text(f"INSERT INTO public.{table} TABLE kept.{table}"))


class SharedWorker:
    """One plain worker for the tests of a module that need a worker and nothing more, started on first use
    and again after a test stopped it. A test that needs the broker to itself (its own worker killed mid-step,
    a crashing one, none at all) stops every worker first (``stack.stop_all()``); ``tidy`` stops whatever
    else a test started (its own workers, a beat), before and after it, as ``own_workers`` does."""

    def __init__(self, stack: Stack, *, concurrency: int = 2, **env: str | None) -> None:
        self.stack, self.concurrency, self.env = stack, concurrency, env
        self.current: Worker | None = None

    def worker(self) -> Worker:
        if self.current is None or not self.current.alive():
            self.current = self.stack.start_worker(concurrency=self.concurrency, **self.env)
        return self.current

    def successor(self) -> Worker:
        """A new shared worker; the one before is the caller's (to stop or kill)."""
        self.current = None
        return self.worker()

    def tidy(self) -> None:
        for worker in self.stack.workers:
            if worker is not self.current and worker.alive():
                worker.kill()
