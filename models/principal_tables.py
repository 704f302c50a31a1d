"""Who may act (principals), their Decisions page sessions, and what each may act on (grants)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import ID, Base, UTCDateTime, one_of, utcnow
from models.status import PrincipalKind


class Principal(Base):
    __tablename__ = "principals"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str | None] = mapped_column(String(128), unique=True)  # NULL once disabled
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # +1 at each rotation and at disabling: a Decisions session of an earlier generation has ended.
    token_generation: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))

    __table_args__ = (one_of("kind", PrincipalKind),)


class PageSession(Base):
    """A Decisions page session: the hash of the cookie's random id, bound to a principal's token generation."""

    __tablename__ = "page_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    token_generation: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index(
            "ix_page_sessions_open",
            "principal_id",
            postgresql_where=text("ended_at IS NULL"),
        ),
    )


class Grant(Base):
    __tablename__ = "grants"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"), index=True)
    target: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the sweep had ended every wait this revocation took the authority of (models/fail_closed.py).
    swept_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index(
            "ix_grants_live",
            "principal_id",
            "target",
            postgresql_where=text("revoked_at IS NULL"),
        ),
        # The revocations whose waits the sweep has still to end: its queue, oldest first (0011).
        Index(
            "ix_grants_unswept",
            "revoked_at",
            postgresql_where=text("revoked_at IS NOT NULL AND swept_at IS NULL"),
        ),
    )
