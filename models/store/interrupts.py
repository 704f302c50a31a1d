"""Interrupting a run and giving up a continuation: each one statement of data-modifying CTEs.

An interrupted run's live steps and pending interactions are interrupted with it, its sealed values erased
and any continuation of it still to be driven made dead, each change with its event, in the order they
are read: the continuation given up, the interactions, the steps, then the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import String, and_, bindparam, cast, exists, func, literal_column, select, true, update

from models.base import utcnow
from models.status import ContinuationStatus, InteractionStatus, RunStatus, StepStatus
from models.store.claims import claimable
from models.store.continuations import consumed_and_resumed
from models.store.driver import DriverStatement
from models.store.events import CLOSED_COLUMNS, closed_event, ended_event, event_select, insert_events
from models.store.runs import RUN_RECORD_COLUMNS, RunRecord, StepLike, finish_run_update, finished_by
from models.store.sql import CONT, INTER, STEP, Executor, bp, word, words

_LIVE_CONTINUATION = (ContinuationStatus.READY.value, ContinuationStatus.CLAIMED.value)
_LIVE_STEP = (StepStatus.RUNNING.value, StepStatus.PARKED.value, StepStatus.RESUMING.value)
_WHY = cast(bindparam("why"), String)


def _interrupting(run_id: Any, gate: Any, *first_events: Any, why: Any = _WHY) -> tuple[Any, list[Any]]:
    """The CTEs that interrupt the run ``run_id`` (an expression) with the reason ``why`` (an expression)
    when ``gate`` holds and it is live: the run's terminal CAS (to select from), and the others to add to
    the statement; their events follow ``first_events``."""
    ended = finish_run_update(run_id, why).where(gate).cte("run_ended")
    won = exists(select(ended.c.id))
    pending = INTER.c.status == word(InteractionStatus.PENDING)
    # A pending interaction is erased as it closes (a quorum wait's responses so far may hold sealed values):
    # the two updates never touch the same row.
    erased = (
        update(INTER).where(INTER.c.run_id == run_id, INTER.c.secret.is_not(None), ~pending, won).values(secret=None)
    ).cte("erased")
    closed = (
        update(INTER)
        .where(INTER.c.run_id == run_id, pending, won)
        .values(
            status=InteractionStatus.INTERRUPTED.value, closed_at=bp("at", INTER.c.closed_at), reason=why, secret=None
        )
        .returning(*(INTER.c[name] for name in CLOSED_COLUMNS))
        .cte("closed")
    )
    steps = (
        update(STEP)
        .where(STEP.c.run_id == run_id, STEP.c.status.in_(words(_LIVE_STEP)), won)
        .values(status=StepStatus.INTERRUPTED.value, reason=why, updated_at=bp("at", STEP.c.updated_at))
        .returning(STEP.c.id, STEP.c.name)
        .cte("steps_ended")
    )
    # Through the run's steps (uq_steps_run_id_seq, then uq_continuations_step_id_kind): no index of
    # continuations by run is kept up on every insert and status change for this rare path. Not ``:cid``,
    # which a give-up makes dead in this statement already.
    orphans = (
        update(CONT)
        .where(
            CONT.c.step_id.in_(select(STEP.c.id).where(STEP.c.run_id == run_id)),
            CONT.c.status.in_(words(_LIVE_CONTINUATION)),
            CONT.c.id != bindparam("cid"),
            won,
        )
        .values(status=ContinuationStatus.DEAD.value, reason=why, lease_expires_at=None)
        .cte("orphans")
    )
    n = len(first_events)
    events = insert_events(
        *first_events,
        closed_event(n, "interaction.interrupted", run_id, closed, reason=why),
        event_select(n + 1, "step.interrupted", run_id, steps, step_id=steps.c.id, name=steps.c.name, reason=why),
        ended_event(n + 2, "run.interrupted", run_id, ended, reason=why),
    )
    return ended, [erased, closed, steps, orphans, events]


def _consume_and_interrupt_run() -> Any:
    """``consume`` (``step.resumed`` first for a parked step's continuation) and, only if it won, the run
    ``:rid`` interrupted as ``interrupt_run`` does; the step ``:sid``'s sealed values erased when the run
    had already ended (else the run's erasure covers them). One row (``consumed``, then the record's
    columns, NULL when the run had already ended) when the consume won; none when the claim was lost."""
    consumed, resumed = consumed_and_resumed()
    won = exists(select(consumed.c.id))
    ended, ctes = _interrupting(cast(bindparam("rid"), String), won, resumed)
    # Exclusive of the run's erasure: one statement must not update a row twice.
    step_erased = (
        update(INTER)
        .where(INTER.c.step_id == bindparam("sid"), INTER.c.secret.is_not(None), won, ~exists(select(ended.c.id)))
        .values(secret=None)
    ).cte("step_erased")
    return (
        select(consumed.c.id.label("consumed"), *(ended.c[name] for name in RUN_RECORD_COLUMNS))
        .select_from(consumed.outerjoin(ended, true()))
        .add_cte(step_erased, *ctes)
    )


_CONSUME_AND_INTERRUPT_RUN = DriverStatement(_consume_and_interrupt_run)


def consume_and_interrupt_run(
    session: Executor, continuation_id: str, step: StepLike, *, reason: str, execution_id: str
) -> tuple[bool, RunRecord | None]:
    """claimed -> consumed (as ``consume``), then live -> interrupted for its run as ``interrupt_run``, in
    one statement: whether the consume won, and the run's record (``None`` when the claim was lost or the
    run had already ended; nothing is written when it was lost). A whole unit of work, fit for autocommit."""
    params = {**_params(reason, execution_id, continuation_id), "rid": step.run_id, "sid": step.id}
    row = _CONSUME_AND_INTERRUPT_RUN.first(session, params)
    if row is None:
        return False, None
    return True, (RunRecord(*row[1:]) if row.id is not None else None)


@cache
def _interrupt_run() -> Any:
    ended, ctes = _interrupting(cast(bindparam("rid"), String), true())
    return select(*(ended.c[name] for name in RUN_RECORD_COLUMNS)).add_cte(*ctes)


def _params(reason: str, execution_id: str, continuation_id: str = "") -> dict[str, Any]:
    """What the interrupting CTEs bind: the run's terminal values (``finish_run_update``) among them."""
    status = {"to": RunStatus.INTERRUPTED.value, "res": None, "err": None, "det": None}
    return {**status, "why": reason, **finished_by(execution_id), "at": utcnow(), "cid": continuation_id}


def interrupt_run(session: Executor, run_id: str, *, reason: str, execution_id: str) -> RunRecord | None:
    """live -> interrupted for a run, its live steps and pending interactions, each with an event; its
    continuations still to be driven -> dead. ``None`` when the run is already terminal (a proven outcome
    is never overwritten; nothing is written then)."""
    row = session.execute(_interrupt_run(), {**_params(reason, execution_id), "rid": run_id}).first()
    return None if row is None else RunRecord(*row)


@dataclass(frozen=True)
class Dead:
    """A continuation given up."""

    id: str
    run_id: str
    step_id: str
    reason: str


def _give_up(exhausted: bool) -> Any:
    """The give-up of ``:cid`` (ready|claimed) with the reason ``:why``; ``exhausted``: of ``:cid`` only if
    claimable and out of its ``:max_attempts``, its reason built from the row."""
    live = CONT.c.status.in_(words(_LIVE_CONTINUATION))
    gate: Any = live
    reason: Any = _WHY
    if exhausted:
        gate = and_(claimable(), CONT.c.attempts >= bindparam("max_attempts"))
        # Why an execution released it, when one did (``release_claim``): what the attempts were spent on.
        last = func.coalesce(literal_column("'; an execution was abandoned: '", String).concat(CONT.c.reason),
                             literal_column("''"))  # fmt: skip
        reason = func.concat(literal_column("'continuation '"), CONT.c.name, literal_column("' for step '"),
                             CONT.c.step_id, literal_column("' gave up after '"), CONT.c.attempts,
                             literal_column("' attempts'"), last, type_=String)  # fmt: skip
    dead = (
        update(CONT)
        .where(CONT.c.id == bindparam("cid"), gate)
        .values(status=ContinuationStatus.DEAD.value, reason=reason, lease_expires_at=None)
        .returning(CONT.c.id, CONT.c.run_id, CONT.c.step_id, CONT.c.reason)
        .cte("dead")
    )
    why = select(dead.c.reason).scalar_subquery() if exhausted else _WHY
    # The continuation's run, read from the statement's snapshot (a continuation never changes run).
    run_id = select(CONT.c.run_id).where(CONT.c.id == bindparam("cid")).scalar_subquery()
    given_up = event_select(0, "continuation.dead", dead.c.run_id, dead, continuation_id=dead.c.id, reason=why)
    _, ctes = _interrupting(run_id, exists(select(dead.c.id)), given_up, why=why)
    return select(dead.c.id, dead.c.run_id, dead.c.step_id, dead.c.reason).add_cte(*ctes)


@cache
def _give_up_left() -> Any:
    return _give_up(exhausted=False)


@cache
def _give_up_exhausted() -> Any:
    return _give_up(exhausted=True)


def give_up(session: Executor, continuation_id: str, *, reason: str, execution_id: str | None = None) -> Dead | None:
    """ready|claimed -> dead, and its run (if still live), steps and pending interactions -> interrupted
    with the reason. ``None`` when the continuation is already consumed or dead (nothing is written)."""
    params = _params(reason, execution_id or f"give-up:{continuation_id}", continuation_id)
    row = session.execute(_give_up_left(), params).first()
    return None if row is None else Dead(row.id, row.run_id, row.step_id, row.reason)


def give_up_exhausted(session: Executor, continuation_id: str, *, max_attempts: int) -> Dead | None:
    """A claimable continuation already executed ``max_attempts`` times -> dead, its run interrupted, as
    ``give_up`` with the reason "continuation <name> for step <step> gave up after <n> attempts" (then
    "; an execution was abandoned: <why>" when one released it with a reason), in one statement. ``None``
    when it is not claimable or still has attempts left (nothing is written)."""
    params = {**_params("", f"give-up:{continuation_id}", continuation_id), "max_attempts": max_attempts}
    row = session.execute(_give_up_exhausted(), params).first()
    return None if row is None else Dead(row.id, row.run_id, row.step_id, row.reason)
