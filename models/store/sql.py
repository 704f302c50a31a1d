"""Shared pieces of the store's statements: ids, the tables as Core objects, status words rendered into the SQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    String,
    Table,
    bindparam,
    exists,
    false,
    literal_column,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.tables import (
    Continuation,
    Event,
    EventBatch,
    Grant,
    Interaction,
    Principal,
    Review,
    Run,
    Step,
)
from models.team_tables import InteractionAnswerer, InteractionResponse
from parkway import tracing


def new_id() -> str:
    return uuid.uuid4().hex


# What the answer path runs on: the ORM session of a ``transaction`` or the Core connection of a
# ``core_transaction`` (every statement there is Core, so it needs no session).
Executor = Session | Connection


def word(value: str) -> Any:
    """A status rendered into the SQL text, so the planner matches the partial index on it (PostgreSQL's
    generic plans may not for a bound parameter). Part of the compiled, cached
    statement: a ``literal_execute`` parameter would re-render the SQL string on every execution."""
    text = str(value)
    if not text.replace("_", "").isalnum():  # statuses and kinds only: nothing that needs quoting
        raise ValueError(f"not a status word: {text!r}")
    return literal_column(f"'{text}'", String)


def words(values: Iterable[str]) -> list[Any]:
    """``column.in_(words(...))``: the statuses rendered into the SQL text, not an expanding parameter."""
    return [word(v) for v in values]


# The hot path (claim, consume, a step's outcome, events) runs Core statements on the tables themselves, each
# built once, at its first use (a ``functools.cache`` builder: a process pays for the statements it runs, not
# at import): no ORM unit of work, no per-call statement construction or cache-key work.
CONT = cast(Table, Continuation.__table__)
STEP = cast(Table, Step.__table__)
RUN = cast(Table, Run.__table__)
PRIN = cast(Table, Principal.__table__)
GRANT = cast(Table, Grant.__table__)
INTER = cast(Table, Interaction.__table__)
REV = cast(Table, Review.__table__)
RESP = cast(Table, InteractionResponse.__table__)
ANSWERER = cast(Table, InteractionAnswerer.__table__)


def by_name(**builders: Callable[[], Any]) -> Callable[[str], Any]:
    """A module's ``__getattr__`` (PEP 562) for the statements read by name from outside it (the generated
    SQL's test, ``models/start_sql.py``): each built by its builder when read, not at import."""

    def attribute(name: str) -> Any:
        if name not in builders:
            raise AttributeError(f"module has no attribute {name!r}")
        return builders[name]()

    return attribute


def bp(name: str, column: Any) -> Any:
    """A named bound parameter typed like ``column`` (JSON and UTC datetimes keep their processing)."""
    return bindparam(name, type_=column.type)


# When traced (parkway/tracing.py): the current span's context, read as each statement executes, stored with
# a wait and a continuation (what resumes it links to it), and its trace id with an event.
TRACEPARENT = bindparam("traceparent", callable_=tracing.traceparent, type_=String(55))
TRACE_ID = bindparam("trace_id", callable_=tracing.trace_id, type_=String(32))

EVENTS = Event.__table__  # the view: one row per event, what the binds of an event are typed as
BATCHES = cast(Table, EventBatch.__table__)  # what an insert of events writes (models.store.events)


def skip_locked(stmt: Any) -> Any:
    """``stmt`` locking its rows, skipping those another transaction holds (concurrent sweeps)."""
    return stmt.with_for_update(skip_locked=True)


def insert_unless_taken(table: Table, *key: str) -> Any:
    """An insert into ``table`` that does nothing where a row with the same ``key`` exists: committed, or
    by a transaction still open (waited for, then nothing if it commits). Its ``RETURNING``, as a CTE, is
    ``made_or_found``'s ``made``."""
    return pg_insert(table).on_conflict_do_nothing(index_elements=list(key))


def made_or_found(made: Any, found: Any) -> Any:
    """The insert-or-winner pattern in one statement: the row ``made`` (a CTE of ``insert_unless_taken``)
    inserted, else the row ``found`` (a select of the same columns, by the key) reads in the statement's
    snapshot; a last column ``made`` tells which. Neither when the winner committed while the insert waited
    for it (after that snapshot): ``insert_or_winner`` then reads it again."""
    inserted = select(*made.c, true().label("made"))
    existing = found.add_columns(false().label("made")).where(~exists(select(made.c[0])))
    return union_all(inserted, existing)


T = TypeVar("T")


def insert_or_winner(
    session: Session, entity: type[T], statement: Any, params: dict[str, Any], again: Callable[[], T | None]
) -> tuple[T, bool]:
    """Run ``statement`` (a ``made_or_found``) for the ORM ``entity``: the row, and whether this inserted
    it. The winner of a race that committed after the statement's snapshot is read by ``again``."""
    row = session.execute(select(entity, literal_column("made")).from_statement(statement), params).first()
    if row is not None:
        return row[0], bool(row[1])
    found = again()
    if found is None:  # pragma: no cover - an insert that did nothing lost to a row that exists
        raise RuntimeError(f"{entity.__name__}: the insert did nothing, yet no row holds its key")
    return found, False
