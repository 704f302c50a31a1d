"""A run's event log: appended in the transaction of the change it records."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, insert, select, union_all
from sqlalchemy.orm import Session

from models.base import utcnow
from models.store.sql import INSERT_EVENT, Executor, bp
from models.tables import Event


def event_row(run_id: str, type_: str, **data: Any) -> dict[str, Any]:
    """One event of a run's log (never carrying answer values), for ``append_events``."""
    return {"run_id": run_id, "type": type_, "at": utcnow(), "data": {"run_id": run_id, **data}}


def append_event(session: Session, run_id: str, type_: str, **data: Any) -> None:
    """Append one event to the run's log, inserted now (events take their ``seq`` in statement order)."""
    session.execute(INSERT_EVENT, event_row(run_id, type_, **data))


def append_events(session: Executor, rows: list[dict[str, Any]]) -> None:
    """Append several events in one round trip, in list order."""
    session.execute(INSERT_EVENT, rows)


EVENT_COLUMNS = ("run_id", "type", "at", "data")


def events_if(*conditions: Any) -> Any:
    """PostgreSQL, inside a statement of data-modifying CTEs: insert event ``k`` (bound as ``e{k}_run_id``,
    ``e{k}_type``, ... from ``event_params``) only if ``conditions[k]`` holds, in that order."""
    table = cast(Table, Event.__table__)
    rows = [
        select(*(bp(f"e{k}_{name}", table.c[name]) for name in EVENT_COLUMNS)).where(condition)
        for k, condition in enumerate(conditions)
    ]
    return insert(table).from_select(list(EVENT_COLUMNS), union_all(*rows) if len(rows) > 1 else rows[0])


def event_params(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``event_row`` dicts as the parameters of ``events_if``."""
    return {f"e{k}_{name}": row[name] for k, row in enumerate(rows) for name in EVENT_COLUMNS}


def resumed_event(run_id: str, step_id: str, name: str, continuation_id: str) -> dict[str, Any]:
    return event_row(run_id, "step.resumed", step_id=step_id, name=name, continuation_id=continuation_id)
