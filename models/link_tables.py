"""Approval links (docs/teams.md, "Approval links"): one row per link handed out, for one person and one wait.
Kept apart from models/tables.py by size.

The link's token is never stored: ``token_hash`` is its SHA-256, looked up when the link is opened. A link
decides once (``used_at``, with the response it made and the justification given); it works only while the
wait is pending, its person live and holding a place on it, and ``expires_at`` (the wait's, or sooner) has
not passed: all read anew at each use, so a disabled person, a revoked grant or an ended wait stops it at once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import ID, Base, UTCDateTime, utcnow


class ApprovalLink(Base):
    __tablename__ = "approval_links"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    interaction_id: Mapped[str] = mapped_column(ForeignKey("interactions.id"))
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))  # the person it is for
    made_by_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))  # NULL: for a webhook delivery
    webhook_id: Mapped[str | None] = mapped_column(ID)  # the subscription whose delivery carried it
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # NULL: when the wait ends
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    response_id: Mapped[str | None] = mapped_column(String(200))  # the response it made
    justification: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # A wait's links, by person: the decision record reads the justification of each response.
        Index("ix_approval_links_interaction", "interaction_id", "principal_id"),
    )
