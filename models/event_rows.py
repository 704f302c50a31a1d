"""A run's events as the statements that append them take them: ``event_row`` dicts, bound through
``event_params`` (``models.store.events`` inserts them). Without SQLAlchemy, so ``parkway run start`` makes
its events as the store does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from parkway import tracing

EVENT_COLUMNS = ("run_id", "type", "at", "data", "trace_id")


def event_row(run_id: str, type_: str, **data: Any) -> dict[str, Any]:
    """One event of a run's log (never carrying answer values), for ``append_events``."""
    return {"run_id": run_id, "type": type_, "at": datetime.now(UTC), "data": {"run_id": run_id, **data},
            "trace_id": tracing.trace_id()}  # fmt: skip


def event_params(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``event_row`` dicts as the parameters of ``models.store.events.events_if``: the events of one run."""
    if len({row["run_id"] for row in rows}) > 1:
        raise ValueError("events_if writes the events of one run")
    return {f"e{k}_{name}": row[name] for k, row in enumerate(rows) for name in EVENT_COLUMNS}
