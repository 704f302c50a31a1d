"""Webhook subscriptions and their delivery log (docs/webhooks.md); kept apart from models/tables.py by size.

A subscription is a cursor over the event log: ``cursor`` is the last ``seq`` it is done with (delivered, or
not matching it). The delivery task holds a claim on the row (``claimed_by`` with a lease) while it sends.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from models.base import ID, Base, UTCDateTime, one_of, utcnow
from models.status import WebhookStatus


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(ARRAY(String(64)))  # types, or prefixes ending in ".*"
    targets: Mapped[list[str] | None] = mapped_column(ARRAY(String(200)))  # None: every target
    description: Mapped[str | None] = mapped_column(Text)
    secret_sealed: Mapped[str] = mapped_column(Text)  # parkway.crypto.seal of the whsec_ secret
    # After a rotation, the secret before it, and until when requests are signed with it too.
    previous_secret_sealed: Mapped[str | None] = mapped_column(Text)
    previous_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16))
    # Its deliveries of a question asked, reminded or escalated carry one approval link per named person.
    links: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    reason: Mapped[str | None] = mapped_column(Text)
    cursor: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # failed attempts at the event after the cursor
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)  # no attempt before this (a retry's backoff)
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the sweep's last publish
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        one_of("status", WebhookStatus),
        # The sweep's category: active subscriptions by when they are due (beat/sweep.py).
        Index("ix_webhooks_active_due", "due_at", postgresql_where=text("status = 'active'")),
    )


class WebhookDelivery(Base):
    """One attempt to deliver one event to one subscription: the delivery log."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_webhook_deliveries_listed", "webhook_id", "id"),
        Index("ix_webhook_deliveries_at", "at"),  # the sweep prunes the log by age (PARKWAY_WEBHOOK_LOG_DAYS)
    )


class PushHandler(Base):
    """A push handler (docs/worker-protocol.md, "Push"): an HTTP URL that serves step names and continuation
    keys; its continuations are POSTed to it by ``tasks.push``. Listed in ``workers`` (node ``push:<id>``)
    while registered, so what it serves counts as served."""

    __tablename__ = "push_handlers"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    serves: Mapped[list[str]] = mapped_column(ARRAY(String(200)))  # step names and name@version keys
    secret_sealed: Mapped[str] = mapped_column(Text)  # parkway.crypto.seal of the whsec_ secret
    attempts: Mapped[int] = mapped_column(BigInteger, default=0)  # POSTs made (/metrics)
    failures: Mapped[int] = mapped_column(BigInteger, default=0)  # POSTs that brought no committable outcome
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
