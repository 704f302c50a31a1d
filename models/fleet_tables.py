"""The fleet's tables: the workers that advertise what they run (Celery workers and remote ones), when each
key was last advertised, and remote workers' leases and the receipts of their completions
(models/store/workers.py, models/store/leases.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Integer, String, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from models.base import ID, Base, UTCDateTime, one_of
from models.status import ContinuationKind


class Worker(Base):
    """A worker process's advertisement: the step names and continuation keys it runs, live while its
    heartbeat keeps ``expires_at`` ahead of the database's clock (models/store/workers.py)."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    node: Mapped[str] = mapped_column(String(200))  # its Celery node name: where a delivery is handed on to
    pid: Mapped[int] = mapped_column(Integer)
    steps: Mapped[list[str]] = mapped_column(ARRAY(String(200)))
    continuations: Mapped[list[str]] = mapped_column(ARRAY(String(200)))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # A process outside Celery that leases work over HTTP (its lease calls are its heartbeats; 0014).
    remote: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # A remote worker's principal: work is routed to it only on targets it may lease (0019).
    principal_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))


class AdvertisedVersion(Base):
    """When a live worker last advertised a key (``start``: a step name; ``resume``: a continuation's
    ``name@version``), kept once its last worker is gone: what ``PARKWAY_VERSION_GRACE_S`` counts from."""

    __tablename__ = "advertised_versions"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Whose fleet last advertised it (remote workers', else Celery workers'): whose presence its grace counts (0021).
    remote: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))

    __table_args__ = (one_of("kind", ContinuationKind),)


class FleetPresence(Base):
    """When a fleet (``celery``: Celery workers; ``remote``: remote workers, whose lease calls come through the
    API) was last seen returning after an absence, and until when it is present: a grace counts only time
    its fleet was up (models/served.py, 0021)."""

    __tablename__ = "fleet_presence"

    fleet: Mapped[str] = mapped_column(String(16), primary_key=True)
    up_since: Mapped[datetime] = mapped_column(UTCDateTime)  # absent -> present, last
    seen_until: Mapped[datetime] = mapped_column(UTCDateTime)  # the latest advertisement's expiry


class Lease(Base):
    """Who holds each remote lease: the principal whose lease call took it. Every later call on the lease is
    looked up by its whole id and answered only for that principal (models/store/leases.py)."""

    __tablename__ = "leases"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the lease id: ``claimed_by`` of its claim
    continuation_id: Mapped[str] = mapped_column(ForeignKey("continuations.id"))
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))


class LeaseReceipt(Base):
    """The receipt of a remote worker's completion, written in the transaction that commits it: an exact
    retry gets it again, another outcome for the same lease is refused (models/store/leases.py)."""

    __tablename__ = "lease_receipts"

    lease_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    continuation_id: Mapped[str] = mapped_column(ForeignKey("continuations.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))
    outcome: Mapped[str] = mapped_column(String(16))  # park | next | complete | fail
    outcome_digest: Mapped[str] = mapped_column(String(64))
    run_status: Mapped[str] = mapped_column(String(16))
    committed_at: Mapped[datetime] = mapped_column(UTCDateTime)
