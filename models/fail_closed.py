"""Sweep category 3, for waits: parked steps that can no longer make progress.

A parked step whose continuation ``name@version`` is not registered, or whose run's owner lost its grant
on the run's target, would take an answer (200) and then throw it away at claim. The sweep finds them
from the pending interactions (``ix_interactions_pending``: its cost follows the waits, not the tables)
and ends them through the one interruption transition, ``store.interrupt_run``: the run, the step and
its pending interactions ``interrupted`` with the reason, any continuation of the run ``dead``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, or_, select
from sqlalchemy.orm import Session

from models import store
from models.status import InteractionStatus, PrincipalKind, StepStatus
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


def _owner_granted() -> Any:
    """The run's owner holds a live grant on its target (admins hold every target), as the claim reads it
    (``models.store.claims``): keep the two the same."""
    return or_(
        _P.c.kind == store.word(PrincipalKind.ADMIN),
        exists().where(_G.c.principal_id == _P.c.id, _G.c.target == _R.c.target, _G.c.revoked_at.is_(None)),
    )


# Both selections walk the pending interactions (``ix_interactions_pending``) and look up each one's step
# or run in a scalar subquery: PostgreSQL runs that per row through the primary key, never as a join that
# the planner may turn into a scan of the whole steps or runs table (it did, at 10^5 terminal runs).
_PENDING = _I.c.status == store.word(InteractionStatus.PENDING)
_PARKED_ON = (
    select(_S.c.continuation)
    .where(_S.c.id == _I.c.step_id, _S.c.status == store.word(StepStatus.PARKED))
    .scalar_subquery()
)
_OWNER_GRANTED = (
    select(_owner_granted()).select_from(_R.join(_P, _P.c.id == _R.c.owner_id)).where(_R.c.id == _I.c.run_id)
).scalar_subquery()


def _distinct(rows: Any, reason: Any) -> list[Wait]:
    seen: dict[str, Wait] = {}
    for row in rows:
        seen.setdefault(row[1], Wait(run_id=row[0], step_id=row[1], reason=reason(row)))
    return list(seen.values())


def unregistered_waits(session: Session, *, registered: Collection[str], batch: int) -> list[Wait]:
    """Parked steps whose continuation ``name@version`` is not among ``registered`` (unlocked)."""
    continuation = _PARKED_ON.label("continuation")
    stmt = (
        select(_I.c.run_id, _I.c.step_id, continuation)
        .where(_PENDING, _PARKED_ON.not_in(sorted(registered)))
        .limit(batch)
    )
    return _distinct(session.execute(stmt), lambda row: f"continuation version {row[2]} is not registered")


def revoked_waits(session: Session, *, batch: int) -> list[Wait]:
    """Parked steps (a pending interaction is only ever a parked step's) of runs whose owner no longer
    holds a live grant on the run's target (unlocked)."""
    stmt = select(_I.c.run_id, _I.c.step_id).where(_PENDING, _OWNER_GRANTED.is_(False)).limit(batch)
    return _distinct(session.execute(stmt), lambda _row: AUTHORITY_REVOKED)


def _locking() -> Any:
    """The parked step ``:sid``, locked unless another transaction holds it, with whether its run ``:rid``'s
    owner still lacks a live grant (grants are not guarded by the step's lock: read with it, not after)."""
    revoked = (
        select(_R.c.id).join(_P, _P.c.id == _R.c.owner_id).where(_R.c.id == bindparam("rid"), ~_owner_granted())
    ).exists()
    parked = select(_S.c.id, revoked.label("revoked")).where(
        _S.c.id == bindparam("sid"), _S.c.status == store.word(StepStatus.PARKED)
    )
    return store.skip_locked(parked)


_LOCKING = _locking()


def interrupt_wait(session: Session, wait: Wait) -> store.RunRecord | None:
    """parked (with pending interactions) -> interrupted, through ``store.interrupt_run``.

    Locks the step first, like answer, cancel and expiry (one lock order); a step locked by one of them
    is skipped this pass. ``None`` when the step is no longer parked, its owner holds a grant again, or
    the run already ended (the CAS lost). Two statements: the interrupt must read after the lock (a
    statement's snapshot predates the locks it takes).
    """
    locked = session.execute(_LOCKING, {"sid": wait.step_id, "rid": wait.run_id}).first()
    if locked is None:
        return None
    if wait.reason == AUTHORITY_REVOKED and not locked.revoked:
        return None
    return store.interrupt_run(session, wait.run_id, reason=wait.reason, execution_id=f"sweep:{wait.step_id}")
