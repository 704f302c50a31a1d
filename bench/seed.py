"""Fixture data: actors, parked steps (through the store's own transitions) and bulk terminal rows.

Parked steps are made exactly as a worker makes them — ``create_run`` → ``claim`` → the registered step
body → ``consume`` + ``park`` — but in-process, many per transaction and without publishing, so seeding
5,000 of them takes seconds. The sweep's terminal rows are fixture data, not state transitions: they are
inserted with ``INSERT … SELECT generate_series`` on the server.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from bench.workflows import ASK, BENCH_DDL, DONE, TARGET, ask
from models import store
from models.base import utcnow
from models.tables import Step
from parkway.db import transaction
from parkway.tokens import hash_token
from tasks.outcomes import interaction_specs
from tasks.sdk import Context, request_digest

AGENT = "bench-agent"
HUMAN = "bench-human"
HTTP_HUMAN = "bench-http"
SERIES = "generate_series(CAST(:a AS bigint), CAST(:b AS bigint))"


@dataclass
class Parked:
    interaction_id: str
    step_id: str
    run_id: str


def setup_actors() -> str:
    """Bench tables, an agent and two humans granted on the bench target; returns the HTTP human's token."""
    token = "pk_bench_" + uuid.uuid4().hex
    with transaction() as session:
        for ddl in BENCH_DDL:
            session.execute(text(ddl))
        for kind, name, token_hash in (
            ("agent", AGENT, None),
            ("human", HUMAN, None),
            ("human", HTTP_HUMAN, hash_token(token)),
        ):
            principal = store.create_principal(session, kind=kind, name=name, token_hash=token_hash)
            assert principal is not None, f"principal {name} exists already"
            store.create_grant(session, principal_id=principal.id, target=TARGET)
    return token


def seed_parked(count: int, *, snapshot: dict[str, Any] | None = None, per_tx: int = 250) -> list[Parked]:
    """``count`` runs of ``bench.ask``, each parked on one pending question."""
    out: list[Parked] = []
    payload = snapshot or {}
    digest = request_digest(ASK, payload, TARGET)
    while len(out) < count:
        with transaction() as session:
            owner = store.principal_by_name(session, AGENT)
            assert owner is not None
            for _ in range(min(per_tx, count - len(out))):
                run, start = store.create_run(
                    session,
                    workflow=ASK,
                    payload=payload,
                    owner=owner,
                    target=TARGET,
                    idempotency_key=None,
                    request_digest=digest,
                )
                assert start is not None
                execution_id = store.new_id()
                claimed = store.claim(session, start.id, execution_id=execution_id, lease_s=60, max_attempts=5)
                assert claimed is not None
                step = session.get_one(Step, start.step_id)
                ctx = Context(run_id=run.id, step_id=step.id, attempt=1, execution_id=execution_id)
                outcome = ask(ctx, payload)
                assert store.consume(session, start.id, execution_id=execution_id) is not None
                specs = interaction_specs(outcome.interactions)
                store.park(
                    session,
                    step,
                    continuation=outcome.continuation,
                    snapshot=outcome.snapshot,
                    interactions=specs,
                    from_continuation=False,
                )
                iid = store.interaction_id(step.id, specs[0].key, specs[0].kind, specs[0].resources)
                out.append(Parked(interaction_id=iid, step_id=step.id, run_id=run.id))
    return out


def seed_rows(start: int, count: int) -> list[int]:
    """Baseline rows ``queued`` for the bare CAS task."""
    ids = list(range(start, start + count))
    with transaction() as session:
        session.execute(
            text("INSERT INTO bench_rows (id, status) SELECT g, 'queued' FROM " + SERIES + " g"),
            {"a": start, "b": start + count - 1},
        )
    return ids


def count_consumed_resumes() -> int:
    with transaction() as session:
        return int(
            session.execute(
                text("SELECT count(*) FROM continuations WHERE kind = 'resume' AND status = 'consumed'")
            ).scalar_one()
        )


def count_pending_continuations() -> int:
    """``ready`` + ``claimed`` continuations, each counted on its partial index: cheap to poll whatever
    the size of the table (a plain count of consumed rows is a scan that grows with every run)."""
    with transaction() as session:
        return int(
            session.execute(
                text(
                    "SELECT (SELECT count(*) FROM continuations WHERE status = 'ready')"
                    " + (SELECT count(*) FROM continuations WHERE status = 'claimed')"
                )
            ).scalar_one()
        )


def count_done_rows(ids_from: int, ids_to: int) -> int:
    with transaction() as session:
        return int(
            session.execute(
                text("SELECT count(*) FROM bench_rows WHERE status = 'done' AND id BETWEEN :a AND :b"),
                {"a": ids_from, "b": ids_to},
            ).scalar_one()
        )


# --------------------------------------------------------------------------- bulk terminal rows (sweep)

_TYPE_DEFAULTS = {
    "boolean": "false",
    "integer": "0",
    "bigint": "0",
    "smallint": "0",
    "double precision": "0",
    "real": "0",
    "numeric": "0",
    "json": "'{}'::json",
    "jsonb": "'{}'::jsonb",
    "timestamp with time zone": "now()",
    "timestamp without time zone": "now()",
}


def _required_columns(conn: Any, table: str) -> dict[str, str]:
    """NOT NULL columns without a server default: column -> data type (other engineers add columns)."""
    rows = conn.execute(
        text(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = :t AND is_nullable = 'NO' AND column_default IS NULL"
        ),
        {"t": table},
    ).all()
    return {r[0]: r[1] for r in rows}


def insert_series(
    conn: Any, table: str, values: dict[str, str], *, first: int, last: int, params: dict[str, Any] | None = None
) -> None:
    """``INSERT INTO table (…) SELECT <expr per column> FROM generate_series(first, last) AS g``.

    Expressions may use ``g`` and the bound ``params``. Required columns the bench does not know get a
    neutral value of their type.
    """
    columns = dict(values)
    for column, data_type in _required_columns(conn, table).items():
        if column not in columns:
            columns[column] = _TYPE_DEFAULTS.get(data_type, "''")
    names = ", ".join(f'"{c}"' for c in columns)
    exprs = ", ".join(columns.values())
    conn.execute(
        text(f"INSERT INTO {table} ({names}) SELECT {exprs} FROM {SERIES} AS g"),
        {"a": first, "b": last, **(params or {})},
    )


def _ids(prefix: str) -> str:
    # 32 hex characters, like store.new_id(), distinct per prefix and number.
    return f"md5('{prefix}' || g::text)"


def bulk_terminal(conn: Any, owner_id: str, *, first: int, last: int) -> None:
    """Runs ``first..last`` with one step, one answered interaction and one consumed continuation each,
    in the terminal mixes a long-lived installation accumulates (all projected)."""
    old = "now() - interval '30 days' + (g % 86400) * interval '1 second'"
    insert_series(
        conn,
        "runs",
        {
            "id": _ids("r"),
            "workflow": "'bench.ask'",
            "status": "(ARRAY['completed','completed','completed','failed','canceled','interrupted'])[1 + g % 6]",
            "owner_id": f"'{owner_id}'",
            "target": f"'{TARGET}'",
            "payload": "'{}'::json",
            "result": '\'{"go": "yes"}\'::json',
            "created_at": old,
            "updated_at": old,
            "completed_at": old,
            "finished_by": _ids("x"),
            "projection_pending": "false",
        },
        first=first,
        last=last,
    )
    insert_series(
        conn,
        "steps",
        {
            "id": _ids("s"),
            "run_id": _ids("r"),
            "seq": "1",
            "name": "'bench.ask'",
            "status": "'completed'",
            "payload": "'{}'::json",
            "snapshot": "'{}'::json",
            "continuation": "'bench.done@1'",
            "created_at": old,
            "updated_at": old,
        },
        first=first,
        last=last,
    )
    insert_series(
        conn,
        "interactions",
        {
            "id": _ids("i"),
            "run_id": _ids("r"),
            "step_id": _ids("s"),
            "key": "'go'",
            "kind": "'question'",
            "prompt": "'Go?'",
            "schema": '\'{"type": "string"}\'::json',
            "target": f"'{TARGET}'",
            "status": "(ARRAY['answered','answered','rejected','expired','canceled','interrupted'])[1 + g % 6]",
            "expires_at": f"CASE WHEN g % 2 = 0 THEN {old} ELSE NULL END",
            "value": "'\"yes\"'::json",
            "sensitive": "'[]'::json",
            "answered_at": old,
            "closed_at": old,
            "created_at": old,
        },
        first=first,
        last=last,
    )
    insert_series(
        conn,
        "continuations",
        {
            "id": _ids("c"),
            "run_id": _ids("r"),
            "step_id": _ids("s"),
            "kind": "'resume'",
            "name": "'bench.done@1'",
            "status": "CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'consumed' END",
            "attempts": "1",
            "publishes": "1",
            "enqueued_at": old,
            "claimed_by": _ids("x"),
            "created_at": old,
            "consumed_at": old,
        },
        first=first,
        last=last,
    )


def bulk_due(conn: Any, owner_id: str, *, first: int, count: int) -> dict[str, tuple[int, int]]:
    """Rows a sweep pass has to act on, ``count`` of each kind: stale ``ready`` continuations, ``claimed``
    ones whose lease expired, and ``pending`` interactions past their expiry. Returns the id ranges."""
    ranges = {
        "stale_ready": (first, first + count - 1),
        "expired_lease": (first + count, first + 2 * count - 1),
        "expired_question": (first + 2 * count, first + 3 * count - 1),
    }
    lo, hi = first, first + 3 * count - 1
    now = "now()"
    insert_series(
        conn,
        "runs",
        {
            "id": _ids("r"),
            "workflow": "'bench.ask'",
            "status": "'waiting'",  # the answered ones read running: their continuation is due (models/derived.py)
            "owner_id": f"'{owner_id}'",
            "target": f"'{TARGET}'",
            "payload": "'{}'::json",
            "created_at": now,
            "updated_at": now,
            "projection_pending": "false",
        },
        first=lo,
        last=hi,
    )
    insert_series(
        conn,
        "steps",
        {
            "id": _ids("s"),
            "run_id": _ids("r"),
            "seq": "1",
            "name": "'bench.ask'",
            "status": "'parked'",  # the answered ones read resuming
            "payload": "'{}'::json",
            "snapshot": "'{}'::json",
            "continuation": "'bench.done@1'",
            "created_at": now,
            "updated_at": now,
        },
        first=lo,
        last=hi,
    )
    insert_series(
        conn,
        "interactions",
        {
            "id": _ids("i"),
            "run_id": _ids("r"),
            "step_id": _ids("s"),
            "key": "'go'",
            "kind": "'question'",
            "prompt": "'Go?'",
            "schema": '\'{"type": "string"}\'::json',
            "target": f"'{TARGET}'",
            "status": "'answered'",
            "value": "'\"yes\"'::json",
            "answered_at": now,
            "closed_at": now,
            "sensitive": "'[]'::json",
            "created_at": now,
        },
        first=lo,
        last=ranges["expired_lease"][1],
    )
    insert_series(
        conn,
        "interactions",
        {
            "id": _ids("i"),
            "run_id": _ids("r"),
            "step_id": _ids("s"),
            "key": "'go'",
            "kind": "'question'",
            "prompt": "'Go?'",
            "schema": '\'{"type": "string"}\'::json',
            "target": f"'{TARGET}'",
            "status": "'pending'",
            "expires_at": "now() - interval '1 hour'",
            "sensitive": "'[]'::json",
            "created_at": now,
        },
        first=ranges["expired_question"][0],
        last=hi,
    )
    insert_series(
        conn,
        "continuations",
        {
            "id": _ids("c"),
            "run_id": _ids("r"),
            "step_id": _ids("s"),
            "kind": "'resume'",
            "name": "'bench.done@1'",
            "status": "'ready'",
            "attempts": "0",
            "publishes": "1",
            "enqueued_at": "now() - interval '1 hour'",
            "created_at": now,
        },
        first=lo,
        last=ranges["expired_lease"][1],
    )
    return ranges


def reset_due(conn: Any, ranges: dict[str, tuple[int, int]]) -> None:
    """Put the due rows back as they were before a sweep pass acted on them."""
    a, b = ranges["stale_ready"]
    conn.execute(
        text(
            "UPDATE continuations SET status = 'ready', enqueued_at = now() - interval '1 hour', "
            "attempts = 0, claimed_by = NULL, lease_expires_at = NULL "
            "WHERE id IN (SELECT md5('c' || g::text) FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g)"
        ),
        {"a": a, "b": b},
    )
    a, b = ranges["expired_lease"]
    conn.execute(
        text(
            "UPDATE continuations SET status = 'claimed', enqueued_at = now() - interval '1 hour', "
            "attempts = 1, claimed_by = 'bench-dead-execution', "
            "lease_expires_at = now() - interval '1 minute' "
            "WHERE id IN (SELECT md5('c' || g::text) FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g)"
        ),
        {"a": a, "b": b},
    )
    a, b = ranges["expired_question"]
    sub = "(SELECT md5('{p}' || g::text) FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g)"
    conn.execute(text(f"DELETE FROM continuations WHERE step_id IN {sub.format(p='s')}"), {"a": a, "b": b})
    conn.execute(
        text(
            "UPDATE interactions SET status = 'pending', closed_at = NULL, "
            f"expires_at = now() - interval '1 hour' WHERE id IN {sub.format(p='i')}"
        ),
        {"a": a, "b": b},
    )
    conn.execute(text(f"UPDATE steps SET status = 'parked' WHERE id IN {sub.format(p='s')}"), {"a": a, "b": b})
    conn.execute(text(f"UPDATE runs SET status = 'waiting' WHERE id IN {sub.format(p='r')}"), {"a": a, "b": b})


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def principal_id(name: str) -> str:
    with transaction() as session:
        principal = store.principal_by_name(session, name)
        assert principal is not None
        return principal.id


# --------------------------------------------------------------------------- bulk parked steps (COPY)

_PY_DEFAULTS: dict[str, Any] = {
    "boolean": False,
    "integer": 0,
    "bigint": 0,
    "smallint": 0,
    "double precision": 0.0,
    "real": 0.0,
    "numeric": 0,
    "json": "{}",
    "jsonb": "{}",
}


def _copy(conn: Any, table: str, rows: list[dict[str, Any]]) -> None:
    """COPY rows into a table; NOT NULL columns the bench does not know get a neutral value."""
    if not rows:
        return
    columns = list(rows[0])
    now = utcnow()
    for column, data_type in _required_columns(conn, table).items():
        if column not in columns:
            value = now if data_type.startswith("timestamp") else _PY_DEFAULTS.get(data_type, "")
            columns.append(column)
            for row in rows:
                row[column] = value
    raw = conn.connection.driver_connection
    names = ", ".join(f'"{c}"' for c in columns)
    with raw.cursor() as cursor, cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in columns])


def bulk_parked(count: int, *, snapshot: dict[str, Any] | None = None, continuation: str = DONE) -> list[Parked]:
    """``count`` runs of ``bench.ask`` in exactly the rows ``create_run`` → claim → ``park`` → consume
    leave (run ``waiting``, step ``parked`` on ``continuation``, one ``pending`` question with its deterministic
    id, the start continuation ``consumed``), written with COPY: seconds for thousands, where the store path takes
    minutes on a busy 2-core machine. ``seed_parked`` is the store path; ``case_anatomy`` uses it."""
    from parkway.db import get_engine

    payload = snapshot or {}
    payload_json = json.dumps(payload)
    owner = principal_id(AGENT)
    digest = request_digest(ASK, payload, TARGET)
    specs = interaction_specs(ask(Context("", "", 1, ""), payload).interactions)
    spec = specs[0]
    now = utcnow()
    runs, steps, interactions, continuations = [], [], [], []
    out: list[Parked] = []
    for _ in range(count):
        run_id, step_id = store.new_id(), store.new_id()
        iid = store.interaction_id(step_id, spec.key, spec.kind, spec.resources)
        runs.append(
            {
                "id": run_id, "workflow": ASK, "status": "waiting", "owner_id": owner, "target": TARGET,
                "payload": payload_json, "request_digest": digest, "created_at": now, "updated_at": now,
                "projection_pending": False,
            }
        )  # fmt: skip
        steps.append(
            {
                "id": step_id, "run_id": run_id, "seq": 1, "name": ASK, "status": "parked",
                "payload": payload_json, "snapshot": payload_json, "continuation": continuation,
                "created_at": now, "updated_at": now,
            }
        )  # fmt: skip
        interactions.append(
            {
                "id": iid, "run_id": run_id, "step_id": step_id, "key": spec.key, "kind": spec.kind,
                "prompt": spec.prompt, "schema": json.dumps(spec.schema), "target": spec.target,
                "status": "pending", "sensitive": json.dumps(list(spec.sensitive)), "created_at": now,
                "continuation": continuation,
            }
        )  # fmt: skip
        continuations.append(
            {
                "id": store.new_id(), "run_id": run_id, "step_id": step_id, "kind": "start", "name": ASK,
                "status": "consumed", "attempts": 1, "publishes": 1, "enqueued_at": now,
                "claimed_by": store.new_id(), "created_at": now, "consumed_at": now,
            }
        )  # fmt: skip
        out.append(Parked(interaction_id=iid, step_id=step_id, run_id=run_id))
    with get_engine().begin() as conn:
        _copy(conn, "runs", runs)
        _copy(conn, "steps", steps)
        _copy(conn, "interactions", interactions)
        _copy(conn, "continuations", continuations)
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE runs, steps, interactions, continuations"))
    return out


def bulk_answer(parked: list[Parked]) -> list[str]:
    """Put parked steps in the state ``store.answer`` commits when it answers their last question
    (interaction ``answered``, a ``ready`` resume continuation stamped as enqueued now: the step reads
    ``resuming``, its run ``running``, as stored they stay); returns the continuation ids, which the caller
    publishes or not."""
    from parkway.db import get_engine
    from tasks.sdk import response_digest

    human = principal_id(HUMAN)
    now = utcnow()
    value = json.dumps("yes")
    digest = response_digest("yes")
    step_ids = [p.step_id for p in parked]
    continuations = []
    ids = []
    for p in parked:
        cid = store.new_id()
        ids.append(cid)
        continuations.append(
            {
                "id": cid, "run_id": p.run_id, "step_id": p.step_id, "kind": "resume", "name": "bench.done@1",
                "status": "ready", "attempts": 0, "publishes": 1, "enqueued_at": now, "created_at": now,
            }
        )  # fmt: skip
    with get_engine().begin() as conn:
        conn.execute(
            text(
                "UPDATE interactions SET status = 'answered', value = CAST(:v AS json), "
                "response_id = md5(id), response_digest = :d, answered_by_id = :h, answered_at = :t, "
                "closed_at = :t WHERE step_id = ANY(:s) AND status = 'pending'"
            ),
            {"v": value, "d": digest, "h": human, "t": now, "s": step_ids},
        )
        _copy(conn, "continuations", continuations)
    return ids


def nothing_stale(conn: Any) -> None:
    """Stamp every ready continuation as enqueued now, so a pass finds none stale."""
    conn.execute(text("UPDATE continuations SET enqueued_at = now() WHERE status = 'ready'"))
