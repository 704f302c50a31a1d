"""Pending waits by the million, for the scale case: the rows ``create_run`` → claim → ``park`` → consume
leave, events included, written on the server with ``INSERT … SELECT generate_series``.

``bench.seed.bulk_parked`` writes the same rows from Python with COPY (and without events); this is its
sibling for sizes where building the rows in Python would take longer than the measurement. Wait ``g``
(1, 2, 3 …) has the ids ``md5('w<table>' || g)``, is asked of one of ``TARGETS`` (``g mod 50``) and was
created ``g`` seconds after ``base``: a database grows by adding waits ``last + 1 …`` later than every
earlier one, as a platform that keeps running does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from bench.seed import SERIES, insert_series
from bench.workflows import ASK, DONE

TARGETS = [f"team:scale-{n:02d}" for n in range(50)]
# parkway_event_seqs() numbers a transaction's events in 16 bits: 4 events a wait, under 65,536 a transaction.
WAITS_PER_TX = 16_000
EVENTS_PER_WAIT = 4  # run.created, continuation.ready (the start), step.parked, interaction.asked
TABLES = ("runs", "steps", "interactions", "continuations", "event_batches")
STATEMENTS = (("run.created", "continuation.ready"), ("step.parked", "interaction.asked"))


def wait_id(table: str, g: int) -> str:
    """The id the seeder gave wait ``g``'s row in ``table`` (runs, steps, interactions, continuations)."""
    import hashlib

    return hashlib.md5(f"w{table}{g}".encode()).hexdigest()


def _ids(table: str) -> str:
    return f"md5('w{table}' || g::text)"


_TARGET = f"'team:scale-' || lpad((g % {len(TARGETS)})::text, 2, '0')"
_AT = "CAST(:base AS timestamptz) + g * interval '1 second'"


def _batch(conn: Any, events: dict[str, str], *, first: int, last: int, base: datetime) -> None:
    """One ``event_batches`` row per wait holding ``events`` (type -> data beyond ``run_id``), in order."""
    each = ", ".join(
        f"json_build_object('type', '{kind}', 'data', json_build_object('run_id', {_ids('runs')}, {data}))"
        for kind, data in events.items()
    )
    conn.execute(
        text(
            f"INSERT INTO event_batches (first_seq, run_id, at, events) SELECT parkway_event_seqs({len(events)}), "
            f"{_ids('runs')}, {_AT}, json_build_array({each}) FROM {SERIES} AS g"
        ),
        {"a": first, "b": last, "base": base},
    )


def _rows(owner_id: str) -> dict[str, dict[str, str]]:
    """Each table's columns for wait ``g``, as ``bench.seed.bulk_parked`` writes them."""
    run, step, interaction, start = _ids("runs"), _ids("steps"), _ids("interactions"), _ids("continuations")
    runs = {
        "id": run, "workflow": f"'{ASK}'", "status": "'waiting'", "owner_id": f"'{owner_id}'", "target": _TARGET,
        "payload": "'{}'::json", "request_digest": "md5(g::text) || md5(g::text)", "created_at": _AT,
        "updated_at": _AT, "projection_pending": "false",
    }  # fmt: skip
    steps = {
        "id": step, "run_id": run, "seq": "1", "name": f"'{ASK}'", "status": "'parked'", "payload": "'{}'::json",
        "snapshot": "'{}'::json", "continuation": f"'{DONE}'", "created_at": _AT, "updated_at": _AT,
    }  # fmt: skip
    interactions = {
        "id": interaction, "run_id": run, "step_id": step, "key": "'go'", "kind": "'question'", "prompt": "'Go?'",
        "schema": '\'{"type": "string"}\'::json', "target": _TARGET, "status": "'pending'",
        "sensitive": "'[]'::json", "created_at": _AT, "continuation": f"'{DONE}'",
    }  # fmt: skip
    continuations = {
        "id": start, "run_id": run, "step_id": step, "kind": "'start'", "name": f"'{ASK}'", "status": "'consumed'",
        "attempts": "1", "publishes": "1", "enqueued_at": _AT, "claimed_by": _ids("executions"),
        "created_at": _AT, "consumed_at": _AT,
    }  # fmt: skip
    return {"runs": runs, "steps": steps, "interactions": interactions, "continuations": continuations}


def _events(owner_name: str) -> dict[str, str]:
    """The events the store's own path leaves for one parked wait (type -> its data beyond ``run_id``)."""
    step, start = _ids("steps"), _ids("continuations")
    return {
        "run.created": f"'workflow', '{ASK}', 'owner', '{owner_name}', 'target', {_TARGET}",
        "continuation.ready": f"'continuation_id', {start}, 'step_id', {step}, 'name', '{ASK}'",
        "step.parked": f"'step_id', {step}, 'continuation', '{DONE}'",
        "interaction.asked": f"'interaction_id', {_ids('interactions')}, 'step_id', {step}, 'key', 'go', "
        f"'kind', 'question', 'target', {_TARGET}",
    }


def _chunk(conn: Any, owner: tuple[str, str], *, first: int, last: int, base: datetime) -> None:
    for table, columns in _rows(owner[0]).items():
        insert_series(conn, table, columns, first=first, last=last, params={"base": base})
    events = _events(owner[1])
    for statement in STATEMENTS:  # the start's events, then the park's: a batch each, as the store writes them
        _batch(conn, {kind: events[kind] for kind in statement}, first=first, last=last, base=base)


def bulk_waits(engine: Engine, owner: tuple[str, str], *, first: int, last: int, base: datetime) -> None:
    """Waits ``first..last`` (``owner``: the agent's id and name), ``WAITS_PER_TX`` to a transaction."""
    for lo in range(first, last + 1, WAITS_PER_TX):
        with engine.begin() as conn:
            _chunk(conn, owner, first=lo, last=min(lo + WAITS_PER_TX - 1, last), base=base)


def relation_bytes(engine: Engine) -> dict[str, int]:
    """``pg_total_relation_size`` (heap, indexes, TOAST) of each table a wait writes to."""
    with engine.connect() as conn:
        return {t: int(conn.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar_one()) for t in TABLES}
