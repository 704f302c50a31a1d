"""Approvals as teams make them (docs/teams.md): each principal's response to a quorum wait, and who may
answer a wait beyond the grants on its target. Kept apart from models/tables.py by size."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, one_of, utcnow
from models.status import AnswererSource, InteractionStatus


class InteractionResponse(Base):
    """One principal's response to a wait that needs more than one (``quorum`` > 1): recorded once, its
    receipt kept for an exact retry, in the place its principal held (its own, or one delegated to it: one
    response per place). Its sensitive fields are sealed in the interaction's ``secret``."""

    __tablename__ = "interaction_responses"

    interaction_id: Mapped[str] = mapped_column(ForeignKey("interactions.id"), primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"), primary_key=True)
    place_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))  # whose place it was made in
    response_id: Mapped[str] = mapped_column(String(200))
    response_digest: Mapped[str] = mapped_column(String(64))
    value: Mapped[Any | None] = mapped_column(JSON)  # the clear part (sensitive fields sealed apart)
    approved: Mapped[bool | None] = mapped_column()  # a permission's verdict; NULL for a question
    status: Mapped[str] = mapped_column(String(16))  # the interaction's status this response left: its receipt
    level: Mapped[int] = mapped_column(Integer)  # the wait's escalation level when it came
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        one_of("status", InteractionStatus),
        UniqueConstraint("interaction_id", "place_id"),  # a place counts once towards the quorum
    )


class InteractionAnswerer(Base):
    """Who may answer a wait beyond the grants on its target: a named assignee, an escalation level (a
    principal or a target, from ``level`` on), or a delegate: the move of one place (``place_id``, whose
    place it first was) from who delegated to the delegate, with their note. A place is held by the
    delegate of its latest move (``store.place_of``)."""

    __tablename__ = "interaction_answerers"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    interaction_id: Mapped[str] = mapped_column(ForeignKey("interactions.id"))
    source: Mapped[str] = mapped_column(String(16))
    level: Mapped[int] = mapped_column(Integer, default=0)  # answerable once the wait's level reaches it
    principal_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))
    target: Mapped[str | None] = mapped_column(String(200))  # a grant on it gives access (escalation)
    by_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))  # a delegation's delegator
    place_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))  # the place a delegation moves
    note: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        one_of("source", AnswererSource),
        Index("ix_interaction_answerers_interaction", "interaction_id"),
        # "for me": the waits that name a principal (the Decisions page, listings).
        Index("ix_interaction_answerers_principal", "principal_id", postgresql_where=text("principal_id IS NOT NULL")),
        # "escalated to a target I am granted on": the waits whose levels name a target (0018).
        Index("ix_interaction_answerers_target", "target", postgresql_where=text("target IS NOT NULL")),
    )
