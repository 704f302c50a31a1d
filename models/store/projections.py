"""A terminal run's recorded projection failure: the run locked for its retry, and the record cleared once
a retry wrote it (models/projections.py has the cursor that covers the runs that projected fine)."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from models.store.runs import RunRecord
from models.store.sql import RUN, skip_locked
from models.tables import Run


def lock_run_for_projection(session: Session, run_id: str) -> Run | None:
    """The run, locked for its projector; ``None`` when unknown or another projector holds it."""
    run: Run | None = session.scalar(skip_locked(select(Run).where(Run.id == run_id)))
    return run


@cache
def _clear_projection() -> Any:
    return (
        update(RUN)
        .where(
            RUN.c.id == bindparam("rid"),
            RUN.c.projection_pending.is_(True),
            RUN.c.status == bindparam("was"),
            RUN.c.finished_by == bindparam("by"),
        )
        .values(
            projection_pending=False, projection_attempts=0, projection_next_at=None
        )  # a success clears the back-off
    )


def clear_projection_pending(session: Session, run: RunRecord | Run) -> bool:
    """recorded failure -> none, only while the run's terminal record is what was projected; ``False``
    when it changed or was cleared already."""
    result = session.execute(_clear_projection(), {"rid": run.id, "was": run.status, "by": run.finished_by})
    return getattr(result, "rowcount", 0) == 1
