"""Review receipts: running -> completed | failed | interrupted, only by the owning execution."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, String, and_, bindparam, cast, select, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.status import ContinuationStatus, ReviewStatus
from models.store.events import append_event, event_select, insert_events
from models.store.sql import REV, bp, new_id, skip_locked, word
from models.tables import Continuation, Review


def start_review(session: Session, *, run_id: str, step_id: str, kind: str, execution_id: str) -> Review:
    """-> running: a review receipt, owned by the execution that started it."""
    now = utcnow()
    review = Review(
        id=new_id(),
        run_id=run_id,
        step_id=step_id,
        kind=kind,
        status=ReviewStatus.RUNNING,
        finding_count=0,
        verification_count=0,
        execution_id=execution_id,
        created_at=now,
        updated_at=now,
    )
    session.add(review)
    session.flush()
    append_event(session, run_id, "review.started", review_id=review.id, step_id=step_id, kind=kind)
    return review


def review_progress(
    session: Session, review_id: str, *, execution_id: str, finding_count: int, verification_count: int
) -> Review | None:
    """running -> running with new counts, only by its owner; ``None`` when not running or not owned."""
    return session.scalar(
        update(Review)
        .where(Review.id == review_id, Review.status == ReviewStatus.RUNNING, Review.execution_id == execution_id)
        .values(finding_count=finding_count, verification_count=verification_count, updated_at=utcnow())
        .returning(Review)
        .execution_options(synchronize_session=False)
    )


_REVIEW_ENDS = and_(REV.c.id == bindparam("vid"), REV.c.status == word(ReviewStatus.RUNNING))


def _record_review() -> Any:
    done = (
        update(REV)
        .where(_REVIEW_ENDS, REV.c.execution_id == bindparam("eid"))
        .values(
            status=bindparam("to"),
            verdict=bindparam("verdict"),
            finding_count=bindparam("fc"),
            verification_count=bindparam("vc"),
            updated_at=bp("at", REV.c.updated_at),
        )
        .returning(*REV.c)
        .cte("done")
    )
    event = event_select(0, cast(bindparam("etype"), String), done.c.run_id, done, review_id=done.c.id,
                         verdict=done.c.verdict, finding_count=done.c.finding_count,
                         verification_count=done.c.verification_count)  # fmt: skip
    return select(*done.c).add_cte(insert_events(event))


_RECORD_REVIEW = _record_review()


def record_review(
    session: Session,
    review_id: str,
    *,
    execution_id: str,
    verdict: str,
    finding_count: int,
    verification_count: int,
    failed: bool = False,
) -> Row[Any] | None:
    """running -> completed|failed with its verdict and counts, and its event (one statement); ``None``
    when it is not running or not owned by ``execution_id`` (nothing is written)."""
    status = ReviewStatus.FAILED if failed else ReviewStatus.COMPLETED
    params = {"vid": review_id, "eid": execution_id, "to": status.value, "verdict": verdict, "fc": finding_count,
              "vc": verification_count, "at": utcnow(), "etype": f"review.{status.value}"}  # fmt: skip
    return session.execute(_RECORD_REVIEW, params).first()


_ANY_RUNNING_REVIEW = (
    select(REV.c.id).where(REV.c.status == word(ReviewStatus.RUNNING), REV.c.step_id == bindparam("sid")).limit(1)
)


def running_reviews(session: Session, step_id: str) -> list[Review]:
    """The step's running reviews (first asked on the ``running`` partial index: almost always none)."""
    if session.execute(_ANY_RUNNING_REVIEW, {"sid": step_id}).first() is None:
        return []
    return list(
        session.scalars(select(Review).where(Review.step_id == step_id, Review.status == ReviewStatus.RUNNING)).all()
    )


def _owner_alive() -> Any:
    return (
        select(Continuation.id)
        .where(
            Continuation.claimed_by == Review.execution_id,
            Continuation.status == word(ContinuationStatus.CLAIMED),
            Continuation.lease_expires_at >= db_now(),
        )
        .exists()
    )


def stranded_reviews(session: Session, *, batch: int) -> list[Review]:
    """running reviews whose owning execution no longer holds a live claim (it died or moved on)."""
    return list(
        session.scalars(
            skip_locked(
                select(Review)
                .where(Review.status == word(ReviewStatus.RUNNING), ~_owner_alive())
                .order_by(Review.created_at)
                .limit(batch)
            )
        ).all()
    )


def _interrupt_review() -> Any:
    done = (
        update(REV)
        .where(_REVIEW_ENDS)
        .values(
            status=ReviewStatus.INTERRUPTED.value,
            verdict="incomplete",
            reason=bindparam("why"),
            updated_at=bp("at", REV.c.updated_at),
        )
        .returning(*REV.c)
        .cte("done")
    )
    event = event_select(0, "review.interrupted", done.c.run_id, done, review_id=done.c.id, reason=done.c.reason)
    return select(*done.c).add_cte(insert_events(event))


_INTERRUPT_REVIEW = _interrupt_review()


def interrupt_review(session: Session, review: Review, *, evidence: str) -> Row[Any] | None:
    """running -> interrupted with its event (one statement); only status, verdict and reason change (the
    counts are kept). ``None`` when it is not running any more (nothing is written)."""
    reason = (
        f"owner execution {review.execution_id} is gone ({evidence}); "
        f"{review.finding_count} findings and {review.verification_count} verifications were recorded"
    )
    return session.execute(_INTERRUPT_REVIEW, {"vid": review.id, "why": reason, "at": utcnow()}).first()


def owner_evidence(session: Session, execution_id: str) -> str:
    """What is known of an execution: the continuation it claimed and what became of it."""
    row = session.scalar(select(Continuation).where(Continuation.claimed_by == execution_id))
    if row is None:
        return "its claim was released after its lease expired"
    if row.status == ContinuationStatus.CLAIMED:
        return f"its lease on continuation {row.id} expired at {row.lease_expires_at}"
    return f"continuation {row.id} it ran is {row.status}"
