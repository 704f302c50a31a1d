"""Pending projections, in the order they are due, and the back-off of one that keeps failing.

A run's projections are due at ``coalesce(projection_next_at, completed_at)`` (the key of the partial index
``ix_runs_projection_pending``): when it ended, until a write fails; then each failure pushes the time out
(exponential, capped), so a run whose write keeps failing never holds back the newer ones. Times come from
the database's clock (``models.clock.db_now``).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, select, text, update
from sqlalchemy.orm import Session

from models.clock import db_now
from models.tables import Run

_R = cast(Table, Run.__table__)

BACKOFF_BASE_S = 1.0  # after the first failure
BACKOFF_CAP_S = 300.0  # the longest a failing projection waits between attempts

# Written as the index's expression, so the planner matches ``ix_runs_projection_pending``.
due_at = func.coalesce(text("projection_next_at"), text("completed_at"))


def backoff_s(attempts: int) -> float:
    """How long to wait after the ``attempts``-th failed write: 1, 2, 4 … seconds, at most the cap."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** max(0, min(attempts - 1, 30)))


def pending_projections(session: Session, *, batch: int) -> list[str]:
    """Terminal runs whose projections are pending and due now, the longest due first (at most ``batch``;
    rows another projector holds are skipped)."""
    pending = text("projection_pending")  # the index's predicate, verbatim
    stmt = select(Run.id).where(pending, due_at <= db_now()).order_by(due_at).limit(batch)
    return list(session.scalars(stmt.with_for_update(skip_locked=True)).all())


def record_projection_failure(session: Session, run: Run) -> datetime | None:
    """A failed projection write: attempts + 1 and the next attempt pushed out by ``backoff_s``, only
    while the run is still pending with the attempts the caller read. Returns the new next-attempt time,
    or ``None`` when it lost the race (another projector cleared or counted it)."""
    attempts = run.projection_attempts + 1
    next_at: datetime | None = session.execute(
        update(_R)
        .where(
            _R.c.id == run.id,
            _R.c.projection_pending.is_(True),
            _R.c.projection_attempts == run.projection_attempts,
        )
        .values(projection_attempts=attempts, projection_next_at=db_now(backoff_s(attempts)))
        .returning(_R.c.projection_next_at)
    ).scalar_one_or_none()
    return next_at
