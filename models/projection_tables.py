"""The projections' tables (migration 0028): the cursor that says which terminal runs have their projections
written, and the schedule-history view of the terminal runs (models/projections.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, SmallInteger, String, Table
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime
from models.event_tables import VIEWS


class ProjectionCursor(Base):
    """The one row (0028): every terminal run whose event batches all sort below ``position`` has its
    projections written, or its failed write recorded on its row (models/projections.py)."""

    __tablename__ = "projection_cursor"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)  # 1, the one row
    position: Mapped[int] = mapped_column(BigInteger)
    moved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ScheduleHistory(Base):
    """Projection of a run's terminal state, as a scheduler's history view reads it: since 0028 the view
    ``schedule_history`` of the terminal runs, agreeing with each run's record by construction."""

    __table__ = Table(
        "schedule_history",
        VIEWS,
        Column("run_id", String(64), primary_key=True),
        Column("workflow", String(200)),
        Column("status", String(16)),
        Column("completed_at", UTCDateTime),
        Column("execution_id", String(64)),
        Column("recorded_at", UTCDateTime),
    )

    run_id: Mapped[str]
    workflow: Mapped[str]
    status: Mapped[str]
    completed_at: Mapped[datetime]
    execution_id: Mapped[str | None]
    recorded_at: Mapped[datetime]
