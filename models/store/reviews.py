"""Review receipts: running -> completed | failed | interrupted, only by the owning execution."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Row, String, and_, bindparam, case, cast, exists, func, insert, select, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.status import ContinuationStatus, ReviewStatus
from models.store.claims import live_claim
from models.store.events import batches_of, event_params, event_row, event_select, events_if, insert_events
from models.store.sql import CONT, REV, Executor, bp, new_id, skip_locked, word
from models.tables import Review


@cache
def _start_review() -> Any:
    started = (
        insert(REV)
        .values(
            id=bindparam("vid"),
            run_id=bindparam("rid"),
            step_id=bindparam("sid"),
            kind=bindparam("kind"),
            status=ReviewStatus.RUNNING.value,
            finding_count=0,
            verification_count=0,
            execution_id=bindparam("eid"),
            created_at=bp("at", REV.c.created_at),
            updated_at=bp("at", REV.c.updated_at),
        )
        .returning(REV.c.id)
        .cte("started")
    )
    return select(started.c.id).add_cte(events_if(exists(select(started.c.id))).cte("events"))


def start_review(session: Session, *, run_id: str, step_id: str, kind: str, execution_id: str) -> str:
    """-> running: a review receipt, owned by the execution that started it, and its event (one statement);
    returns its id."""
    review_id = new_id()
    started = event_row(run_id, "review.started", review_id=review_id, step_id=step_id, kind=kind)
    params = {"vid": review_id, "rid": run_id, "sid": step_id, "kind": kind, "eid": execution_id, "at": utcnow(),
              **event_params([started])}  # fmt: skip
    session.execute(_start_review(), params)
    return review_id


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


@cache
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
                         step_id=done.c.step_id, kind=done.c.kind, verdict=done.c.verdict,
                         finding_count=done.c.finding_count, verification_count=done.c.verification_count)  # fmt: skip
    return select(*done.c).add_cte(insert_events(event))


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
    return session.execute(_record_review(), params).first()


@cache
def _running_reviews() -> Any:
    return select(REV).where(REV.c.status == word(ReviewStatus.RUNNING), REV.c.step_id == bindparam("sid"))


def running_reviews(session: Session, step_id: str) -> list[Row[Any]]:
    """The step's running reviews (asked on the ``running`` partial index: almost always none)."""
    return list(session.execute(_running_reviews(), {"sid": step_id}).all())


def _owner_alive() -> Any:
    return select(CONT.c.id).where(live_claim(Review.execution_id)).exists()


@cache
def _stranded() -> Any:
    """The oldest running reviews whose owning execution no longer holds a live claim (it died or moved
    on), up to ``:n`` of them, skipping rows another sweep holds."""
    oldest = select(Review).where(Review.status == word(ReviewStatus.RUNNING), ~_owner_alive()).order_by(
        Review.created_at)  # fmt: skip
    return skip_locked(oldest.limit(bindparam("n")))


def stranded_reviews(session: Session, *, batch: int) -> list[Review]:
    """running reviews whose owning execution no longer holds a live claim (it died or moved on)."""
    return list(session.scalars(_stranded(), {"n": batch}).all())


def _utc_text(at: Any) -> Any:
    """A timestamp as Python prints an aware UTC datetime (``2026-01-02 03:04:05.678901+00:00``, no
    fraction when it is zero): reasons once built in Python keep their text."""
    utc = func.timezone("UTC", at)
    fraction = case((func.to_char(utc, "US") == "000000", ""), else_=func.to_char(utc, ".US"))
    return func.concat(func.to_char(utc, "YYYY-MM-DD HH24:MI:SS"), fraction, "+00:00", type_=String)


def _owner_evidence() -> Any:
    """What is known of the review's owning execution, as text: the continuation it claimed and what
    became of it (read in the statement's snapshot)."""
    claimed = CONT.c.status == word(ContinuationStatus.CLAIMED)
    said = case(
        (
            claimed,
            func.concat("its lease on continuation ", CONT.c.id, " expired at ", _utc_text(CONT.c.lease_expires_at)),
        ),
        else_=func.concat("continuation ", CONT.c.id, " it ran is ", CONT.c.status),
    )
    # Through the review's step (its continuations' unique key): never a walk of every continuation.
    mine = and_(CONT.c.step_id == REV.c.step_id, CONT.c.claimed_by == REV.c.execution_id)
    owned = select(said).where(mine).correlate(REV).limit(1).scalar_subquery()
    return func.coalesce(owned, "its claim was released after its lease expired")


def _interrupt_review(chosen: Any = None) -> Any:
    """The review ``:vid`` (or each of the CTE ``chosen``) running -> interrupted with its event."""
    reason = func.concat("owner execution ", REV.c.execution_id, " is gone (", _owner_evidence(), "); ",
                         REV.c.finding_count, " findings and ", REV.c.verification_count,
                         " verifications were recorded", type_=String)  # fmt: skip
    which = (
        _REVIEW_ENDS if chosen is None else and_(REV.c.id == chosen.c.id, REV.c.status == word(ReviewStatus.RUNNING))
    )
    done = (
        update(REV)
        .where(which)
        .values(status=ReviewStatus.INTERRUPTED.value, verdict="incomplete", reason=reason,
                updated_at=bp("at", REV.c.updated_at))
        .returning(*REV.c)
        .cte("done")
    )  # fmt: skip
    event = event_select(0, "review.interrupted", done.c.run_id, done, review_id=done.c.id, step_id=done.c.step_id,
                         kind=done.c.kind, verdict=done.c.verdict, finding_count=done.c.finding_count,
                         verification_count=done.c.verification_count, reason=done.c.reason)  # fmt: skip
    # In the order the reviews started, as a pass of one statement per review wrote them.
    rows = event.add_columns(done.c.created_at.label("started")).subquery("every")
    return select(*done.c).add_cte(batches_of(rows, rows.c.started, rows.c.o).cte("events"))


@cache
def _interrupt_running() -> Any:
    return _interrupt_review()


@cache
def _interrupt_stranded() -> Any:
    return _interrupt_review(_stranded().cte("stranded"))


def interrupt_review(session: Session, review_id: str) -> Row[Any] | None:
    """running -> interrupted (its owner is gone) with its event, one statement: only status, verdict and
    reason change (the counts are kept; the reason names the owner, what became of its claim, and the
    counts). ``None`` when it is not running any more (nothing is written)."""
    return session.execute(_interrupt_running(), {"vid": review_id, "at": utcnow()}).first()


def interrupt_stranded_reviews(session: Executor, *, batch: int) -> list[Row[Any]]:
    """running -> interrupted, as ``interrupt_review``, for each of the oldest ``batch`` reviews whose
    owner no longer holds a live claim (as ``stranded_reviews`` finds them): one statement; the reviews
    interrupted (none: nothing stranded)."""
    return list(session.execute(_interrupt_stranded(), {"n": batch, "at": utcnow()}).all())
