"""SQLAlchemy 2 tables. Partial indexes cover the statuses the sweep reads."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    and_,
    event,
    exists,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.orm import Mapped, column_property, mapped_column

from models.base import ID as ID  # the column kinds and the check, re-exported for the other table modules
from models.base import Base, UTCDateTime, one_of, utcnow
from models.base import BigId as BigId
from models.derived import DerivedStatus, StatusComparator, run_status, step_status
from models.event_tables import Event as Event  # the log's view and its storage, re-exported
from models.event_tables import EventBatch as EventBatch
from models.principal_tables import Grant as Grant  # re-exported
from models.principal_tables import PageSession as PageSession
from models.principal_tables import Principal as Principal
from models.projection_tables import ProjectionCursor as ProjectionCursor
from models.projection_tables import ScheduleHistory as ScheduleHistory
from models.status import (
    ContinuationKind,
    ContinuationStatus,
    InteractionKind,
    InteractionStatus,
    ReviewStatus,
    RunStatus,
    StepStatus,
    ToolPhase,
    ToolReplay,
)


class Run(DerivedStatus, Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    workflow: Mapped[str] = mapped_column(String(200))
    # not indexed: a status change stays in place (0002); ``waiting`` while a step resumes (``status``: 0029)
    stored_status: Mapped[str] = mapped_column("status", String(16))
    if TYPE_CHECKING:
        status: Mapped[str]  # run_status(runs), below
    owner_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))  # uq (owner_id, idempotency_key) leads with it
    target: Mapped[str] = mapped_column(String(200), index=True)
    payload: Mapped[Any] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_digest: Mapped[str | None] = mapped_column(String(64))
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    error_details: Mapped[Any | None] = mapped_column(JSON)  # a failed run's Fail details (result stays null)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_by: Mapped[str | None] = mapped_column(String(64))  # the execution's id (projections compare it)
    finished_on: Mapped[str | None] = mapped_column(String(200))  # "<node> pid <pid>": the process (0015)
    title: Mapped[str | None] = mapped_column(String(200))  # what the run is about, as a step says (0015)
    warnings: Mapped[Any | None] = mapped_column(JSON)
    # A failed projection write recorded (the column ``projection_pending``; since 0028 only a failure sets
    # it), the failed writes so far, and when the next may be tried (NULL: at once); cleared on success.
    projection_failed: Mapped[bool] = mapped_column("projection_pending", Boolean, default=False)
    projection_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    projection_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    if TYPE_CHECKING:  # mapped when the mappers are configured (``_derive_projection_pending``), not at import
        projection_pending: Mapped[bool]

    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key"),
        one_of("status", RunStatus),
        # An owner's live runs on a target, for a revocation of its grant (0011): ``completed_at`` is set by
        # the terminal update, which is never HOT anyway (``projection_pending`` is in an index's predicate).
        Index("ix_runs_live_owner", "owner_id", "target", postgresql_where=text("completed_at IS NULL")),
        # The runs a caller may read, newest first: per granted target, or all (models/paging.py, 0012).
        Index("ix_runs_target_listed", "target", "created_at", "id"),
        Index("ix_runs_listed", "created_at", "id"),
        # Ordered by when each pending projection is due: a run that keeps failing moves back (0006).
        Index(
            "ix_runs_projection_pending",
            func.coalesce(text("projection_next_at"), text("completed_at")),
            postgresql_where=text("projection_pending"),
        ),
    )


@event.listens_for(Run, "before_mapper_configured")
def _derive_projection_pending(mapper: Any, _cls: Any) -> None:
    """``Run.projection_pending``, derived (0028, models/projections.py): terminal, and a failure recorded or a
    batch of the run's events at or past the projection cursor. Deferred: loaded where it is read
    (``undefer``), not with every run; built as the mappers are configured (a process's first engine), not
    at import."""
    batch = EventBatch.__table__.c
    runs = Run.__table__.c
    cursor = select(ProjectionCursor.__table__.c.position).scalar_subquery()
    past = exists().where(batch.run_id == runs.id, batch.first_seq >= cursor)
    pending = and_(runs.completed_at.isnot(None), or_(runs.projection_pending, past))
    mapper.add_property("projection_pending", column_property(pending, deferred=True))


class Step(DerivedStatus, Base):
    __tablename__ = "steps"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))  # uq (run_id, seq) leads with it
    seq: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200))
    stored_status: Mapped[str] = mapped_column("status", String(16))  # ``parked`` while it resumes (0029)
    if TYPE_CHECKING:
        status: Mapped[str]  # step_status(steps), below
    payload: Mapped[Any | None] = mapped_column(JSON)
    snapshot: Mapped[Any | None] = mapped_column(JSON)
    continuation: Mapped[str | None] = mapped_column(String(200))
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (UniqueConstraint("run_id", "seq"), one_of("status", StepStatus))


Run.status = column_property(run_status(Run.__table__), comparator_factory=StatusComparator)
Step.status = column_property(step_status(Step.__table__), comparator_factory=StatusComparator)


class Interaction(Base):
    __tablename__ = "interactions"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))  # uq (step_id, key) leads with it
    key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    prompt: Mapped[str | None] = mapped_column(Text)
    schema: Mapped[Any | None] = mapped_column(JSON)
    action: Mapped[str | None] = mapped_column(String(200))
    resources: Mapped[Any | None] = mapped_column(JSON)
    sensitive: Mapped[Any | None] = mapped_column(JSON)
    target: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    value: Mapped[Any | None] = mapped_column(JSON)
    # Sensitive top-level fields, encrypted (Fernet); erased in the transaction that consumes them.
    secret: Mapped[str | None] = mapped_column(Text)
    response_id: Mapped[str | None] = mapped_column(String(200))
    response_digest: Mapped[str | None] = mapped_column(String(64))
    answered_by_id: Mapped[str | None] = mapped_column(ID)  # no foreign key (0023): principals are never deleted
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    closed_by_id: Mapped[str | None] = mapped_column(ForeignKey("principals.id"))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    continuation: Mapped[str | None] = mapped_column(String(200))  # the name@version its step resumes (0010)
    # Its place among the step's interactions as the Park declared them: lists order by (created_at, position, id).
    position: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # Teams (docs/teams.md, 0016): responses needed, the static options, the escalation level and the timers.
    quorum: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    team: Mapped[Any | None] = mapped_column(JSON)  # assignees_only, reject, remind_after, escalate
    level: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    answered_level: Mapped[int | None] = mapped_column(Integer)
    reminders: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    remind_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    escalate_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The park's span (W3C traceparent) when traced: what resumes the wait links to it (0024).
    traceparent: Mapped[str | None] = mapped_column(String(55))

    __table_args__ = (
        UniqueConstraint("step_id", "key"),
        one_of("kind", InteractionKind),
        one_of("status", InteractionStatus),
        Index(
            "ix_interactions_pending_expiry",
            "expires_at",
            postgresql_where=text("status = 'pending' AND expires_at IS NOT NULL"),
        ),
        # A step's pending interactions (an answer's closing; the waits the sweep checks for a lost authority).
        Index(
            "ix_interactions_pending",
            "step_id",
            postgresql_where=text("status = 'pending'"),
        ),
        # The waits by the continuation they resume: those on a version no live worker runs (models/fail_closed.py).
        Index(
            "ix_interactions_pending_continuation",
            "continuation",
            "created_at",
            # Not implied by a query without the continuation: an answer's closing never scans this one.
            postgresql_where=text("status = 'pending' AND continuation IS NOT NULL"),
        ),
        # Lists oldest first: per granted target and status, or per status (models/paging.py, 0012, 0015).
        Index("ix_interactions_target_listed", "target", "status", "created_at", "position", "id"),
        Index("ix_interactions_listed", "status", "created_at", "position", "id"),
        # The sweep's reminders and escalations, by when each is due (models/store/timers.py, 0016).
        *(
            Index(f"ix_interactions_pending_{c}", c, postgresql_where=text(f"status = 'pending' AND {c} IS NOT NULL"))
            for c in ("remind_at", "escalate_at")
        ),
    )


class Continuation(Base):
    __tablename__ = "continuations"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    # No foreign keys (0023): written beside their run and step, which are never deleted.
    run_id: Mapped[str] = mapped_column(ID)  # a run's continuations: through its steps
    step_id: Mapped[str] = mapped_column(ID)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    publishes: Mapped[int] = mapped_column(Integer, default=0)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    consumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Served only by remote workers when it was made: leased over HTTP, never published to Celery (0014).
    remote: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # When traced (0024): the span that made it due (a run's start, an answer, the step before), and the
    # last execution's that claimed it (a re-drive links to it).
    traceparent: Mapped[str | None] = mapped_column(String(55))
    claimed_trace: Mapped[str | None] = mapped_column(String(55))

    __table_args__ = (
        # At most one continuation per step wait: a double insert is a conflict, not a second unit.
        UniqueConstraint("step_id", "kind"),
        one_of("kind", ContinuationKind),
        one_of("status", ContinuationStatus),
        Index(
            "ix_continuations_ready",
            "enqueued_at",
            postgresql_where=text("status = 'ready' AND NOT remote"),
        ),
        # What a remote worker may lease: by the keys it serves, oldest first (models/store/leases.py, 0014).
        Index(
            "ix_continuations_remote",
            "name",
            "created_at",
            postgresql_where=text("remote AND status IN ('ready', 'claimed')"),
        ),
        Index(
            "ix_continuations_claimed",
            "lease_expires_at",
            postgresql_where=text("status = 'claimed'"),
        ),
        # Is the execution that owns a review still alive? (stranded-review sweep)
        Index(
            "ix_continuations_claimed_by",
            "claimed_by",
            postgresql_where=text("status = 'claimed'"),
        ),
    )


class Review(Base):
    """A receipt row of a review pass over a run: running -> completed | failed | interrupted."""

    __tablename__ = "reviews"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))
    kind: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16))
    verdict: Mapped[str | None] = mapped_column(Text)
    finding_count: Mapped[int] = mapped_column(Integer, default=0)
    verification_count: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    execution_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        one_of("status", ReviewStatus),
        Index(
            "ix_reviews_running",
            "created_at",
            postgresql_where=text("status = 'running'"),
        ),
    )


class ToolCall(Base):
    """The journal of one side effect inside a step: authorizing -> executing -> settled."""

    __tablename__ = "tool_calls"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))
    key: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    args_digest: Mapped[str] = mapped_column(String(64))
    replay: Mapped[str] = mapped_column(String(8))
    phase: Mapped[str] = mapped_column(String(16))
    possibly_ran: Mapped[bool] = mapped_column(Boolean, default=False)
    outcome: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    interaction_id: Mapped[str | None] = mapped_column(String(64))
    runs: Mapped[int] = mapped_column(Integer, default=0)
    # The remote lease that journaled it or last started it running: the one whose outcome it takes (0019).
    journaled_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (UniqueConstraint("step_id", "key"), one_of("replay", ToolReplay), one_of("phase", ToolPhase))


class SweepTotal(Base):
    """Running totals of the recovery sweep per category, read by ``/metrics`` at scrape time."""

    __tablename__ = "sweep_totals"

    category: Mapped[str] = mapped_column(String(32), primary_key=True)
    total: Mapped[int] = mapped_column(BigId, default=0)
    last_count: Mapped[int] = mapped_column(Integer, default=0)
    last_duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    last_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
