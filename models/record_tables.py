"""The decision record's tables (docs/operations.md): the seals of the event log, checkpoints of a hash chain
over every final event in ``seq`` order, each signed; and the index the record is read by."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow
from models.tables import Interaction

# The decided waits by when each was decided, and per target (``models.decisions``): every close sets ``closed_at``.
_DECIDED = text("closed_at IS NOT NULL")
Index("ix_interactions_decided", Interaction.closed_at, Interaction.id, postgresql_where=_DECIDED)
Index("ix_interactions_decided_target", Interaction.target, Interaction.closed_at, Interaction.id,
      postgresql_where=_DECIDED)  # fmt: skip


class Seal(Base):
    """One checkpoint: the events with ``after_seq < seq <= last_seq``, each as an entry (``models.sealing``),
    chained from the previous checkpoint's ``hash`` (``prev``). ``position`` is the chain's head: the next
    checkpoint is inserted at ``position + 1`` or not at all, so two sweeps never seal twice."""

    __tablename__ = "seals"

    position: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    after_seq: Mapped[int] = mapped_column(BigInteger)
    last_seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    count: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the earliest and latest ``at`` of its events
    last_at: Mapped[datetime] = mapped_column(UTCDateTime)
    prev: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(128))  # Ed25519 over ``models.sealing.signed_part``
    entries: Mapped[Any] = mapped_column(JSON)
    sealed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
