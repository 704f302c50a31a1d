"""Reads for the operator's gauges (``/metrics``): continuations by status, the oldest ready one, runs whose
projections lag, and the sweep's totals. Nothing here writes state; each read stays on a small index."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, literal_column, select
from sqlalchemy.orm import Session

from models import projections
from models.tables import Continuation, SweepTotal


def continuation_counts(session: Session) -> dict[str, int]:
    rows = session.execute(select(Continuation.status, func.count()).group_by(Continuation.status)).all()
    return {str(status): int(count) for status, count in rows}


def oldest_ready(session: Session) -> tuple[datetime | None, datetime | None]:
    """``(created_at, enqueued_at)`` of the oldest ``ready`` continuation by each, or ``None`` for none.

    Both read only the rows of the partial index ``ix_continuations_ready``: the cost follows the number
    of ready rows, never the size of the table. The status is rendered literally so PostgreSQL's generic
    plans can match the index's ``WHERE status = 'ready'``.
    """
    ready = Continuation.status == literal_column("'ready'")
    created = session.scalar(select(Continuation.created_at).where(ready).order_by(Continuation.created_at).limit(1))
    enqueued = session.scalar(
        select(Continuation.enqueued_at)
        .where(ready, Continuation.enqueued_at.is_not(None))
        .order_by(Continuation.enqueued_at)
        .limit(1)
    )
    return created, enqueued


def projection_pending_count(session: Session) -> int:
    """Terminal runs whose projections do not agree yet (``models.projections.pending_count``: the recorded
    failures on the partial index ``ix_runs_projection_pending``, the others past the projection cursor)."""
    return projections.pending_count(session)


def sweep_totals(session: Session) -> list[SweepTotal]:
    """The sweep's running totals, one row per category (a handful of rows)."""
    return list(session.scalars(select(SweepTotal).order_by(SweepTotal.category)))
