"""The event log's storage (PostgreSQL, migration 0026): one ``event_batches`` row per writing statement and
run, and ``events``, the view readers map, one row per event.

A batch holds ``k`` events numbered ``first_seq`` … ``first_seq + k - 1``: all of one transaction, so all
share ``first_seq >> 16`` (``seq`` is the writing transaction's id << 16 | its n-th event, migration 0004).
That is what lets a reader bound a range of ``seq`` by the batch's own key (``models.event_reads``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, MetaData, String, Table
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow


class EventBatch(Base):
    """The events one statement wrote for one run, in order. Rows written before 0026 hold one event each
    in ``type`` and ``data`` (``events`` NULL); later ones a JSON array of ``{type, data}`` in ``events``."""

    __tablename__ = "event_batches"

    first_seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    run_id: Mapped[str] = mapped_column(String(64))  # no foreign key (0023): written with the run's change
    type: Mapped[str | None] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    data: Mapped[Any] = mapped_column(JSON, nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(32))  # the trace of its change, when traced (0024)
    events: Mapped[Any] = mapped_column(JSON, nullable=True)

    # Named as when it indexed the table ``events`` (0001): one run's range of the log.
    __table_args__ = (Index("ix_events_run_seq", "run_id", "first_seq"),)


# The view is not a table of the metadata Alembic compares (``migrations/env.py``): 0026 creates it.
VIEWS = MetaData()


class Event(Base):
    """One event, as every reader sees it (the view ``events`` of 0026). ``batch_seq``: its batch's
    ``first_seq``, the column a reader's range goes through to use an index."""

    __table__ = Table(
        "events",
        VIEWS,
        Column("seq", BigInteger, primary_key=True),
        Column("run_id", String(64)),
        Column("type", String(64)),
        Column("at", UTCDateTime, default=utcnow),
        Column("data", JSON),
        Column("trace_id", String(32)),
        Column("batch_seq", BigInteger),
    )

    seq: Mapped[int]
    run_id: Mapped[str]
    type: Mapped[str]
    at: Mapped[datetime]
    data: Mapped[Any]
    trace_id: Mapped[str | None]
    batch_seq: Mapped[int]
