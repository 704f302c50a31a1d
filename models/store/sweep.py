"""The sweep's bounded selections and their compare-and-sets."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import and_, bindparam, case, false, func, null, or_, select, true, union_all, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.served import WORKERS, served
from models.status import ContinuationStatus, InteractionStatus
from models.store.runs import Due
from models.store.sql import CONT, Executor, skip_locked, word
from models.store.workers import now_remote_only
from models.tables import Continuation, Interaction, SweepTotal

# The totals' row that counts passes, idle ones too (an idle pass logs nothing; this is where it is seen).
PASSES = "passes"
DUE_COLUMNS = (CONT.c.id, CONT.c.kind, CONT.c.run_id, CONT.c.step_id, CONT.c.name)  # as ``Due``'s fields


# Category 1's rows: ready, published (or re-stamped) more than ``:older_than_s`` ago. A remote continuation
# is leased over HTTP, never published (``ix_continuations_ready`` leaves it out).
_STALE_READY = and_(
    CONT.c.status == word(ContinuationStatus.READY),
    ~CONT.c.remote,
    or_(CONT.c.enqueued_at.is_(None), CONT.c.enqueued_at < db_now("older_than_s")),
)


@cache
def _mark_for_republish() -> Any:
    # A CTE, run once: as an ``IN`` subquery it may be run again for each row, and a run again skips the
    # rows this statement already updated, then locks the next ones (every stale row, not a batch).
    batch = skip_locked(
        select(CONT.c.id).where(_STALE_READY).order_by(CONT.c.enqueued_at.asc().nulls_first()).limit(bindparam("n"))
    ).cte("batch")
    # Re-routed on the way (``models.store.workers.now_remote_only``): work only remote workers serve now is left
    # to their lease calls, never published to Celery.
    remote = now_remote_only()
    return (
        update(CONT)
        .where(CONT.c.id == batch.c.id, _STALE_READY)
        .values(enqueued_at=db_now(), publishes=CONT.c.publishes + case((remote, 0), else_=1), remote=remote)
        .returning(*DUE_COLUMNS, CONT.c.remote)
    )


_FRESH_READY = and_(
    CONT.c.status == word(ContinuationStatus.READY),
    ~CONT.c.remote,
    CONT.c.enqueued_at >= db_now("older_than_s"),
)


@cache
def _count_up_to(where: Any) -> Any:
    """How many continuations match, counted up to ``:n`` (an index range, never the whole table)."""
    return select(func.count()).select_from(select(CONT.c.id).where(where).limit(bindparam("n")).subquery())


def mark_for_republish(session: Session, *, older_than_s: float, batch: int, queued: int = 0) -> list[Due]:
    """ready -> ready, re-stamped, for up to ``batch`` continuations not enqueued in the last
    ``older_than_s`` seconds of the database's clock, oldest first; returns them to publish (none: nothing
    stale). ``queued``: the messages the broker's queues hold. Those that fresh continuations do not account
    for may be stale ones' (a backlog older than the delay): that many stale rows are left to them, as
    publishing them again would only feed the backlog.

    Concurrent sweeps skip each other's locked rows and the CAS on ``enqueued_at`` keeps one winner.
    """
    params = {"older_than_s": -older_than_s}
    if queued > 0:
        queued -= session.execute(_count_up_to(_FRESH_READY), {**params, "n": queued}).scalar_one()
    if queued > 0:
        batch = min(
            batch, session.execute(_count_up_to(_STALE_READY), {**params, "n": batch + queued}).scalar_one() - queued
        )
        if batch <= 0:
            return []
    rows = session.execute(_mark_for_republish(), {**params, "n": batch})
    return [Due(*r[:-1]) for r in rows if not r.remote]


def remote_keys() -> Any:
    """Every key remote continuations are due on, once each: a skip scan of ``ix_continuations_remote``."""
    later = CONT.alias("later")
    ready = CONT.c.status == word(ContinuationStatus.READY)
    first = select(CONT.c.name.label("key")).where(CONT.c.remote, ready).order_by(CONT.c.name).limit(1)
    keys = first.cte("remote_keys", recursive=True)
    following = (
        select(later.c.name)
        .where(later.c.remote, later.c.status == word(ContinuationStatus.READY), later.c.name > keys.c.key)
        .order_by(later.c.name)
        .limit(1)
        .scalar_subquery()
    )
    return keys.union_all(select(following).where(keys.c.key.is_not(None)))


_STALE_REMOTE = and_(
    CONT.c.remote, CONT.c.status == word(ContinuationStatus.READY), CONT.c.enqueued_at < db_now("older_than_s")
)


@cache
def _to_celery() -> Any:
    """Up to ``:n`` remote continuations ready for more than ``:older_than_s`` seconds whose key a live
    Celery worker serves (each key's oldest first, by ranges of ``ix_continuations_remote``) -> not remote,
    stamped as published now; a concurrent sweep's update of the same row makes this one's CAS miss."""
    keys = remote_keys()
    work = (
        select(CONT.c.id)
        .where(_STALE_REMOTE, CONT.c.name == keys.c.key, served(CONT.c.kind, CONT.c.name, ~WORKERS.c.remote))
        .order_by(CONT.c.created_at)
        .limit(bindparam("n"))
        .lateral("work")
    )
    batch = select(work.c.id).select_from(keys.join(work, true())).where(keys.c.key.is_not(None)).limit(bindparam("n"))
    return (
        update(CONT)
        .where(CONT.c.id.in_(batch.scalar_subquery()), _STALE_REMOTE)
        .values(remote=False, enqueued_at=db_now(), publishes=CONT.c.publishes + 1)
        .returning(*DUE_COLUMNS)
    )


def reroute_to_celery(session: Executor, *, older_than_s: float, batch: int) -> list[Due]:
    """remote -> not remote for up to ``batch`` ready continuations no lease took for ``older_than_s`` seconds
    whose key a live Celery worker serves: whoever serves a key takes its work, whichever kind served it when
    the row was made. Returns them to publish."""
    rows = session.execute(_to_celery(), {"older_than_s": -older_than_s, "n": batch})
    return [Due(*r) for r in rows]


_EXPIRED = and_(CONT.c.status == word(ContinuationStatus.CLAIMED), CONT.c.lease_expires_at < db_now())


@cache
def _release_expired_claims() -> Any:
    # The oldest expired leases, as a CTE run once (see ``_mark_for_republish``): what it locks is the batch.
    oldest = select(CONT.c.id, CONT.c.kind, CONT.c.attempts).where(_EXPIRED).order_by(CONT.c.lease_expires_at)
    batch = skip_locked(oldest.limit(bindparam("n"))).cte("batch")
    left = batch.c.attempts < bindparam("max_attempts")
    released = (
        update(CONT)
        .where(CONT.c.id == batch.c.id, left, _EXPIRED)
        .values(status=ContinuationStatus.READY.value, claimed_by=None, lease_expires_at=None, enqueued_at=db_now(),
                publishes=CONT.c.publishes + 1)
        .returning(*DUE_COLUMNS, CONT.c.remote)
        .cte("released")
    )  # fmt: skip
    # Out of attempts: found, not changed (``give_up_exhausted`` decides each with its own compare-and-set).
    unchanged = select(batch.c.id, batch.c.kind, *(null().label(c.name) for c in DUE_COLUMNS[2:]))
    return union_all(
        select(*(released.c[c.name] for c in DUE_COLUMNS), true().label("released"), released.c.remote),
        unchanged.add_columns(false().label("released"), false().label("remote")).where(~left),
    )


@dataclass(frozen=True)
class ExpiredClaims:
    """What ``release_expired_claims`` did and found: the claims released, to publish (a remote one is
    released but not listed: it is leased again over HTTP), and the ids of those out of attempts, for
    ``give_up_exhausted``."""

    released: list[Due]
    exhausted: list[str]


def release_expired_claims(session: Executor, *, batch: int, max_attempts: int) -> ExpiredClaims:
    """Of up to ``batch`` claims whose lease expired by the database's clock (oldest first, skipping rows
    another sweep holds): those with attempts left -> ready, stamped as enqueued now; those out of attempts
    found, not changed. One statement; empty lists: nothing expired."""
    rows = session.execute(_release_expired_claims(), {"n": batch, "max_attempts": max_attempts}).all()
    return ExpiredClaims(
        released=[Due(*r[:-2]) for r in rows if r.released and not r.remote],
        exhausted=[r.id for r in rows if not r.released],
    )


def expired_claims(session: Session, *, batch: int) -> list[Continuation]:
    """claimed continuations whose lease ran out by the database's clock (the process running the body died)."""
    return list(
        session.scalars(
            skip_locked(
                select(Continuation)
                .where(Continuation.status == word(ContinuationStatus.CLAIMED))
                .where(Continuation.lease_expires_at < db_now())
                .order_by(Continuation.lease_expires_at)
                .limit(batch)
            )
        ).all()
    )


def release_expired_claim(session: Session, continuation_id: str) -> Continuation | None:
    """claimed (lease expired) -> ready, stamped as enqueued now; ``None`` if it changed meanwhile."""
    return session.scalar(
        update(Continuation)
        .where(
            Continuation.id == continuation_id,
            Continuation.status == ContinuationStatus.CLAIMED,
            Continuation.lease_expires_at < db_now(),
        )
        .values(
            status=ContinuationStatus.READY,
            claimed_by=None,
            lease_expires_at=None,
            enqueued_at=db_now(),
            publishes=Continuation.publishes + 1,
        )
        .returning(Continuation)
        .execution_options(synchronize_session=False)
    )


def expirable_interactions(session: Session, *, batch: int) -> list[str]:
    """pending interactions past their expiry (unlocked: ``expire_due`` takes the step lock, then CASes)."""
    return list(
        session.scalars(
            select(Interaction.id)
            .where(
                Interaction.status == word(InteractionStatus.PENDING),
                Interaction.expires_at.is_not(None),
                Interaction.expires_at <= db_now(),
            )
            .order_by(Interaction.expires_at)
            .limit(batch)
        ).all()
    )


def record_sweep(session: Session, counts: dict[str, int], *, duration_s: float) -> None:
    """Add one pass's counts to the running totals, and the pass to ``PASSES``: one upsert of every category."""
    now = utcnow()
    rows = [
        {"category": category, "total": count, "last_count": count, "last_duration_s": duration_s, "last_at": now}
        for category, count in {**counts, PASSES: 1}.items()
    ]
    stmt = pg_insert(SweepTotal).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[SweepTotal.category],
            set_={
                "total": SweepTotal.total + stmt.excluded.total,
                "last_count": stmt.excluded.last_count,
                "last_duration_s": stmt.excluded.last_duration_s,
                "last_at": stmt.excluded.last_at,
            },
        )
    )
