"""Sweep category 3, for waits: parked steps that can no longer make progress.

A parked step whose continuation ``name@version`` no live worker serves and whose grace has run out while its
fleet was up (``models.served``), or whose run's owner lost its grant on the run's target, would take an answer
(200) and then throw it away. The sweep finds the first from the pending interactions by the continuation
they resume (``ix_interactions_pending_continuation``), the second from the revoked grants it has not swept
yet (``ix_grants_unswept``) and their owners' live runs (``ix_runs_live_owner``), and ends them through the
one interruption transition, ``store.interrupt_run``: the run, the step and its pending
interactions ``interrupted`` with the reason, any continuation of the run ``dead``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import Integer, Table, and_, bindparam, case, exists, literal_column, or_, select, true
from sqlalchemy.orm import Session

from models import store
from models.clock import db_now
from models.derived import step_status
from models.served import ADVERTISED, grace_over, served
from models.status import ContinuationKind, ContinuationStatus, InteractionStatus, PrincipalKind, RunStatus, StepStatus
from models.store.sql import CONT, by_name, skip_locked, word, words
from models.store.sweep import remote_keys
from models.store.workers import unserved_reason
from models.tables import Grant, Interaction, Principal, Run, Step

_I = cast(Table, Interaction.__table__)
_S = cast(Table, Step.__table__)
_R = cast(Table, Run.__table__)
_P = cast(Table, Principal.__table__)
_G = cast(Table, Grant.__table__)

AUTHORITY_REVOKED = "authority revoked"


@dataclass(frozen=True)
class Wait:
    """A parked step found by a selection, with why it can no longer make progress."""

    run_id: str
    step_id: str
    reason: str
    version: str | None = None  # the continuation no live worker serves (re-checked under the step's lock)


def _owner_granted() -> Any:
    """The run's owner holds a live grant on its target (admins hold every target), as the claim reads it
    (``models.store.claims``): keep the two the same."""
    return or_(
        _P.c.kind == word(PrincipalKind.ADMIN),
        exists().where(_G.c.principal_id == _P.c.id, _G.c.target == _R.c.target, _G.c.revoked_at.is_(None)),
    )


_PENDING = _I.c.status == word(InteractionStatus.PENDING)


def _distinct(rows: Any, reason: Any) -> list[Wait]:
    seen: dict[str, Wait] = {}
    for row in rows:
        seen.setdefault(row[1], reason(row))
    return list(seen.values())


def parked_keys() -> Any:
    """Every continuation key a pending interaction resumes, once each: a skip scan of
    ``ix_interactions_pending_continuation`` (one index probe per distinct key, whatever the number of waits)."""
    later = _I.alias("later")
    first = select(_I.c.continuation.label("key")).where(_PENDING, _I.c.continuation.is_not(None))
    keys = first.order_by(_I.c.continuation).limit(1).cte("parked_keys", recursive=True)
    following = (
        select(later.c.continuation)
        .where(later.c.status == word(InteractionStatus.PENDING), later.c.continuation > keys.c.key)
        .order_by(later.c.continuation)
        .limit(1)
        .scalar_subquery()
    )
    return keys.union_all(select(following).where(keys.c.key.is_not(None)))


@cache
def _unserved_waits() -> Any:
    """Up to ``:n`` waits on keys no live worker advertises whose grace (``models.served.grace_from``) ran out
    ``:grace`` seconds ago: the key last advertised, and its fleet back, before that (never advertised: the
    wait's own park counts, and any fleet's return); each key's waits oldest first by a range of the index
    (its cutoff bound per key, so the scan stops at the batch or the cutoff)."""
    keys = parked_keys()
    resume = ContinuationKind.RESUME.value
    seen = ADVERTISED.c.last_seen_at
    unserved = (
        select(
            keys.c.key,
            seen,
            case((seen.is_(None), db_now("grace")), else_=literal_column("'infinity'::timestamptz")).label("cutoff"),
        )
        .select_from(keys.outerjoin(ADVERTISED, (ADVERTISED.c.kind == resume) & (ADVERTISED.c.key == keys.c.key)))
        .where(keys.c.key.is_not(None), grace_over(seen, ADVERTISED.c.remote), ~served(resume, keys.c.key))
        .cte("unserved")
    )
    waits = (
        select(_I.c.run_id, _I.c.step_id)
        .where(_PENDING, _I.c.continuation == unserved.c.key, _I.c.created_at < unserved.c.cutoff)
        .order_by(_I.c.created_at)
        .limit(bindparam("n", type_=Integer))
        .lateral("waits")
    )
    return (
        select(waits.c.run_id, waits.c.step_id, unserved.c.key, unserved.c.last_seen_at)
        .select_from(unserved.join(waits, true()))
        .limit(bindparam("n", type_=Integer))
    )


def unserved_waits(session: Session, *, grace_s: float, batch: int) -> list[Wait]:
    """Parked steps on a continuation version no live worker has advertised for ``grace_s`` (unlocked)."""
    rows = session.execute(_unserved_waits(), {"grace": -grace_s, "n": batch})
    resume = ContinuationKind.RESUME.value
    return _distinct(rows, lambda row: Wait(row[0], row[1], unserved_reason(resume, row[2], row[3]), version=row[2]))


@cache
def _unserved_remote() -> Any:
    """Up to ``:n`` due remote continuations (ready, made before ``:grace`` seconds ago) on keys no live
    worker advertises whose grace ran out (as ``_unserved_waits``); each key's oldest first, by a range of
    ``ix_continuations_remote``."""
    keys = remote_keys()
    work = (
        select(CONT.c.id, CONT.c.kind, CONT.c.name)
        .where(CONT.c.remote, CONT.c.status == word(ContinuationStatus.READY), CONT.c.name == keys.c.key,
               CONT.c.created_at < db_now("grace"))
        .order_by(CONT.c.created_at)
        .limit(bindparam("n", type_=Integer))
        .lateral("work")
    )  # fmt: skip
    seen = ADVERTISED.c.last_seen_at
    now_served = or_(served(ContinuationKind.START, work.c.name), served(ContinuationKind.RESUME, work.c.name))
    return (
        select(work.c.id, work.c.kind, work.c.name, seen)
        .select_from(keys.join(work, true()).outerjoin(ADVERTISED, and_(ADVERTISED.c.kind == work.c.kind,
                                                                         ADVERTISED.c.key == work.c.name)))
        .where(keys.c.key.is_not(None), grace_over(seen, ADVERTISED.c.remote), ~now_served)
        .limit(bindparam("n", type_=Integer))
    )  # fmt: skip


@dataclass(frozen=True)
class UnservedWork:
    """A due remote continuation no live worker serves any more (past the grace), with why."""

    continuation_id: str
    kind: str
    key: str
    reason: str


def unserved_remote(session: Session, *, grace_s: float, batch: int) -> list[UnservedWork]:
    """Due remote continuations whose key no live worker has advertised for ``grace_s`` (unlocked: the
    give-up is a compare-and-set, and the fleet is read again just before it)."""
    rows = session.execute(_unserved_remote(), {"grace": -grace_s, "n": batch})
    return [UnservedWork(row.id, row.kind, row.name, unserved_reason(row.kind, row.name, row.last_seen_at))
            for row in rows]  # fmt: skip


@dataclass(frozen=True)
class Revocation:
    """A revoked grant whose waits the sweep has not finished ending."""

    grant_id: str
    principal_id: str
    target: str
    granted: bool  # its principal holds the target again (another live grant, or an admin): nothing to end


@cache
def _revocations() -> Any:
    """Up to ``:n`` revoked grants not yet swept, oldest first (``ix_grants_unswept``), skipping those a
    concurrent sweep holds."""
    again = _G.alias("again")
    granted = or_(
        _P.c.kind == word(PrincipalKind.ADMIN),
        exists().where(again.c.principal_id == _G.c.principal_id, again.c.target == _G.c.target,
                       again.c.revoked_at.is_(None)),
    )  # fmt: skip
    return (
        select(_G.c.id, _G.c.principal_id, _G.c.target, granted)
        .join(_P, _P.c.id == _G.c.principal_id)
        .where(_G.c.revoked_at.is_not(None), _G.c.swept_at.is_(None))
        .order_by(_G.c.revoked_at)
        .limit(bindparam("n", type_=Integer))
        .with_for_update(skip_locked=True, of=_G)
    )


@cache
def _live_runs() -> Any:
    """Up to ``:n`` runs of owner ``:pid`` on ``:target`` that have not ended (``ix_runs_live_owner``), each
    with the step it waits on when it has a pending interaction (else NULL: running, or its wait answered)."""
    waiting_on = select(_I.c.step_id).where(_I.c.run_id == _R.c.id, _PENDING).limit(1).scalar_subquery()
    live_status = _R.c.status.in_(words((RunStatus.RUNNING, RunStatus.WAITING)))
    return (
        select(_R.c.id, waiting_on)
        .where(_R.c.owner_id == bindparam("pid"), _R.c.target == bindparam("target"), _R.c.completed_at.is_(None))
        .where(live_status)
        .limit(bindparam("n", type_=Integer))
    )


def revocations(session: Session, *, batch: int) -> list[Revocation]:
    """The oldest revocations whose waits are still to end, locked for this pass."""
    return [Revocation(*row) for row in session.execute(_revocations(), {"n": batch})]


def revoked_waits(session: Session, *, batch: int) -> list[Wait]:
    """Up to ``batch`` parked steps of runs whose owner lost its grant on the run's target, found from the
    revocations still to sweep (their queue, not every wait: a pass with none reads an empty index). A
    revocation whose owner has no live run left on the target, or holds it again, is marked swept; one
    with runs still running stays queued until they end or park (unlocked waits: ``interrupt_wait`` locks)."""
    waits: list[Wait] = []
    for revocation in revocations(session, batch=batch):
        params = {"pid": revocation.principal_id, "target": revocation.target, "n": batch - len(waits)}
        runs = [] if revocation.granted else session.execute(_live_runs(), params).all()
        if not runs:
            store.mark_revocation_swept(session, revocation.grant_id)
        waits += [Wait(run_id, step_id, AUTHORITY_REVOKED) for run_id, step_id in runs if step_id is not None]
        if len(waits) >= batch:
            break
    return waits


@cache
def _locking() -> Any:
    """The parked step ``:sid``, locked unless another transaction holds it, with whether its run ``:rid``'s
    owner still lacks a live grant, and whether a live worker now serves ``:version`` (neither is guarded
    by the step's lock: read with it, not after)."""
    revoked = (
        select(_R.c.id).join(_P, _P.c.id == _R.c.owner_id).where(_R.c.id == bindparam("rid"), ~_owner_granted())
    ).exists()
    now_served = served(ContinuationKind.RESUME, bindparam("version"))
    parked = select(_S.c.id, revoked.label("revoked"), now_served.label("served")).where(
        _S.c.id == bindparam("sid"), step_status(_S) == word(StepStatus.PARKED)
    )
    return skip_locked(parked)


def interrupt_wait(session: Session, wait: Wait) -> store.RunRecord | None:
    """parked (with pending interactions) -> interrupted, through ``store.interrupt_run``.

    Locks the step first, like answer, cancel and expiry (one lock order); a step locked by one of them
    is skipped this pass. ``None`` when the step is no longer parked, its owner holds a grant again, a
    live worker serves its version again, or the run already ended (the CAS lost). Two statements: the
    interrupt must read after the lock (a statement's snapshot predates the locks it takes).
    """
    locked = session.execute(_locking(), {"sid": wait.step_id, "rid": wait.run_id, "version": wait.version}).first()
    if locked is None:
        return None
    if (wait.reason == AUTHORITY_REVOKED and not locked.revoked) or locked.served:
        return None
    return store.interrupt_run(session, wait.run_id, reason=wait.reason, execution_id=f"sweep:{wait.step_id}")


# What the query-plan test reads by name (tests/integration/test_query_plans.py).
__getattr__ = by_name(_UNSERVED_WAITS=_unserved_waits, _REVOCATIONS=_revocations, _LIVE_RUNS=_live_runs)
