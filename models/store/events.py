"""A run's event log: appended in the transaction of the change it records, as one ``event_batches`` row per
statement and run (models/event_tables.py); readers see one event per ``seq`` through the view ``events``."""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any

from sqlalchemy import (
    JSON,
    Integer,
    String,
    Text,
    case,
    cast,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by
from sqlalchemy.orm import Session

from models.event_rows import event_params as event_params  # their home, without SQLAlchemy
from models.event_rows import event_row as event_row
from models.store.sql import BATCHES, EVENTS, TRACE_ID, Executor, bp


def append_event(session: Session, run_id: str, type_: str, **data: Any) -> None:
    """Append one event to the run's log, inserted now (events take their ``seq`` in statement order)."""
    append_events(session, [event_row(run_id, type_, **data)])


_INSERT_BATCH = text(
    "INSERT INTO event_batches (first_seq, run_id, at, trace_id, events) "
    "VALUES (parkway_event_seqs(CAST(:k AS integer)), :run_id, :at, :trace_id, CAST(:events AS json))"
)


def append_events(session: Executor, rows: list[dict[str, Any]]) -> None:
    """Append several events in one round trip, in list order: one batch per run of consecutive rows."""
    batches = []
    for run_id, group in groupby(rows, key=lambda row: row["run_id"]):
        of_run = list(group)
        events = json.dumps([{"type": row["type"], "data": row["data"]} for row in of_run])
        first = of_run[0]
        batches.append({"k": len(of_run), "run_id": run_id, "at": first["at"], "trace_id": first["trace_id"],
                        "events": events})  # fmt: skip
    if batches:
        session.execute(_INSERT_BATCH, batches)


def batches_of(every: Any, *order: Any) -> Any:
    """The INSERT of the events ``every`` (a subquery of ``EVENT_COLUMNS``) holds, in ``order``, as batches:
    each run of consecutive events of one run one row (``seq`` order stays the order they are listed in).
    A batch's ``at`` and ``trace_id`` are its first event's (one statement's events share them)."""
    rank = func.row_number().over(order_by=list(order))
    island = rank - func.row_number().over(partition_by=every.c.run_id, order_by=list(order))
    ranked = select(*every.c, rank.label("rank"), island.label("island")).subquery("ranked")
    r = ranked.c
    one = func.json_build_object(literal_column("'type'"), r.type, literal_column("'data'"), r.data)
    batches = (
        select(
            cast(func.count(), Integer).label("k"),
            r.run_id,
            func.min(r.at).label("at"),
            func.min(r.trace_id).label("trace_id"),
            func.json_agg(aggregate_order_by(one, r.rank)).label("events"),
        )
        .group_by(r.run_id, r.island)
        .order_by(func.min(r.rank))
        .subquery("batches")
    )
    b = batches.c
    rows = select(func.parkway_event_seqs(b.k), b.run_id, b.at, b.trace_id, b.events)
    return insert(BATCHES).from_select(["first_seq", "run_id", "at", "trace_id", "events"], rows)


def events_if(*conditions: Any, known: dict[int, dict[str, Any]] | None = None, source: Any = None) -> Any:
    """PostgreSQL, inside a statement of data-modifying CTEs: insert event ``k`` (bound as ``e{k}_run_id``,
    ``e{k}_type``, ... from ``event_params``) only if ``conditions[k]`` holds, in that order. ``known[k]``:
    values only the statement reads (columns of its CTEs, by name), added to event ``k``'s bound data.
    ``source``: a FROM of the statement's CTEs of at most one row, whose columns the conditions and ``known``
    are; its row, when there is one, takes the events.

    The events are of one run (``e0_run_id``'s; ``event_params`` refuses others): one batch, built as the
    rows of ``batches_of`` would build it (its ``at`` and ``trace_id`` the least of the events taken) but
    without their sorts, window and aggregate, which cost the statement more to start than the rest of its
    work. Without ``source`` each condition is evaluated once, in a subquery the planner keeps
    (``OFFSET 0``); with it, as expressions of its row (no subquery per condition to start)."""

    def bound(k: int, name: str) -> Any:
        return bp(f"e{k}_{name}", EVENTS.c[name])

    inner = []
    for k, condition in enumerate(conditions):
        data = bound(k, "data")
        if known and k in known:
            pairs: list[Any] = []
            for key, column in known[k].items():
                value = column if source is not None else select(column).scalar_subquery()
                pairs += [literal_column(f"'{key}'"), value]
            data = cast(cast(data, JSONB).op("||")(func.jsonb_build_object(*pairs)), JSON)
        event = func.json_build_object(literal_column("'type'"), bound(k, "type"), literal_column("'data'"), data)
        inner += [condition.label(f"c{k}"), cast(event, Text).label(f"e{k}")]
    if source is None:
        t = select(*inner).offset(literal_column("0")).subquery("taken").c
        held, texts = [t[f"c{k}"] for k in range(len(conditions))], [t[f"e{k}"] for k in range(len(conditions))]
    else:
        held, texts = [c.element for c in inner[::2]], [e.element for e in inner[1::2]]
    one, none = literal_column("1", Integer), literal_column("0", Integer)
    count = sum((case((c, one), else_=none) for c in held), start=none)
    events = func.concat_ws(literal_column("', '"), *(case((c, e)) for c, e in zip(held, texts, strict=True)))
    rows = select(
        func.parkway_event_seqs(count),
        bound(0, "run_id"),
        func.least(*(case((c, bound(k, "at"))) for k, c in enumerate(held))),
        func.least(*(case((c, bound(k, "trace_id"))) for k, c in enumerate(held))),
        cast(func.concat(literal_column("'['"), events, literal_column("']'")), JSON),
    ).where(or_(*held))
    if source is not None:
        rows = rows.select_from(source)
    return insert(BATCHES).from_select(["first_seq", "run_id", "at", "trace_id", "events"], rows)


def resumed_event(run_id: str, step_id: str, name: str, continuation_id: str) -> dict[str, Any]:
    return event_row(run_id, "step.resumed", step_id=step_id, name=name, continuation_id=continuation_id)


def data_of(run_id: Any, **values: Any) -> Any:
    """An event's ``data`` built inside a statement, keys in ``event_row``'s order (``run_id`` first);
    each value a column or a typed expression (an untyped parameter has no type to build JSON from)."""
    pairs = [literal_column("'run_id'"), run_id]
    for key, value in values.items():
        pairs += [literal_column(f"'{key}'"), value]
    return func.json_build_object(*pairs)


def event_select(order: int, type_: str | Any, run_id: Any, source: Any, **data: Any) -> Any:
    """One event per row of ``source`` (a CTE), for ``insert_events``: ``order`` places it among the others;
    ``type_`` a word or an expression."""
    return select(
        literal(order, Integer).label("o"),
        run_id.label("run_id"),
        (cast(literal(type_), String) if isinstance(type_, str) else type_).label("type"),
        bp("at", EVENTS.c.at).label("at"),
        data_of(run_id, **data).label("data"),
        TRACE_ID.label("trace_id"),
    ).select_from(source)


# What an UPDATE closing interactions returns, for ``closed_event``.
CLOSED_COLUMNS = ("id", "step_id", "key", "kind", "target", "status")


def closed_event(order: int, type_: str, run_id: Any, closed: Any, **data: Any) -> Any:
    """``event_select`` of each interaction ``closed`` (a CTE returning ``CLOSED_COLUMNS``) closed."""
    c = closed.c
    return event_select(order, type_, run_id, closed, interaction_id=c.id, step_id=c.step_id, key=c.key,
                        kind=c.kind, target=c.target, status=c.status, **data)  # fmt: skip


def ended_event(order: int, type_: str, run_id: Any, ended: Any, **data: Any) -> Any:
    """``event_select`` of the run ``ended`` (a CTE of ``runs.finish_run_update``) made terminal."""
    c = ended.c
    return event_select(order, type_, run_id, ended, workflow=c.workflow, status=c.status,
                        execution_id=c.finished_by, **data)  # fmt: skip


def insert_events(*selects: Any) -> Any:
    """A CTE inserting the rows of ``event_select``s, ordered by their ``order`` (the order they are read)."""
    every = union_all(*selects).subquery("every") if len(selects) > 1 else selects[0].subquery("every")
    return batches_of(every, every.c.o).cte("events")
