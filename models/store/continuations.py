"""Consuming a claimed continuation: its outcome commits with it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from sqlalchemy import Connection, bindparam, exists, select, true, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.outcome import InteractionSpec
from models.status import ContinuationKind, ContinuationStatus, RunStatus
from models.store.claims import live_claim
from models.store.driver import DriverStatement
from models.store.events import event_params, event_select, events_if, insert_events, resumed_event
from models.store.runs import (
    RUN_RECORD_COLUMNS,
    STEP_OF_RUN,
    Due,
    RunRecord,
    StepLike,
    finish_events,
    finish_run_statement,
    finish_step_statement,
    finished_by,
)
from models.store.sql import CONT, INTER, STEP, bp, word
from models.store.steps import REFUSAL_COLUMNS, next_step_ctes, next_step_params, park_ctes, park_params, refuse
from models.store.teams import name_answerers


# claimed -> consumed, only by the execution holding a live lease (``:eid``, ``live_claim``).
@cache
def consume_update() -> Any:
    return (
        update(CONT)
        .where(CONT.c.id == bindparam("cid"), live_claim(bindparam("eid")))
        .values(
            status=ContinuationStatus.CONSUMED.value, consumed_at=bp("at", CONT.c.consumed_at), lease_expires_at=None
        )
    )


def consumed_and_resumed() -> tuple[Any, Any]:
    """``consume_update()`` as a CTE (id, kind, run_id, step_id), and its ``step.resumed`` (an ``event_select``, first
    of its statement) when the continuation consumed is a parked step's."""
    consumed = consume_update().returning(CONT.c.id, CONT.c.kind, CONT.c.run_id, CONT.c.step_id).cte("consumed")
    c = consumed.c
    name = select(STEP.c.name).where(STEP.c.id == c.step_id).scalar_subquery()
    resumed = event_select(0, "step.resumed", c.run_id, consumed, step_id=c.step_id, name=name, continuation_id=c.id)
    return consumed, resumed.where(c.kind == word(ContinuationKind.RESUME))


def _consume() -> Any:
    """``consume_update()``, and ``step.resumed`` when the continuation consumed is a parked step's."""
    consumed, resumed = consumed_and_resumed()
    return select(consumed.c.id).add_cte(insert_events(resumed))


_CONSUME = DriverStatement(_consume)


def consume(session: Session, continuation_id: str, *, execution_id: str) -> str | None:
    """claimed -> consumed, only by the execution holding the claim; its id, or ``None`` when it lost it.

    A parked step's continuation writes ``step.resumed`` in the same statement, first in the transaction
    that commits it."""
    row = _CONSUME.first(session, {"cid": continuation_id, "eid": execution_id, "at": utcnow()})
    return None if row is None else continuation_id


def _consuming() -> tuple[Any, Any, Any]:
    """``consume_update()`` as a CTE, whether it won, and whether it consumed a parked step's continuation (the
    condition of its ``step.resumed``)."""
    consumed = consume_update().returning(CONT.c.id, CONT.c.kind).cte("consumed")
    won = exists(select(consumed.c.id))
    return consumed, won, exists(select(consumed.c.id).where(consumed.c.kind == word(ContinuationKind.RESUME)))


def _consume_and_finish_run() -> Any:
    """PostgreSQL: ``consume`` (and ``step.resumed`` for a parked step's continuation) and, only if it
    won, ``finish_run``'s writes (the step's CAS, the run's terminal CAS,
    the run's sealed values erased) as one statement of data-modifying CTEs. One row (``consumed``, then
    the terminal record's columns, NULL when the run had already ended) when the consume won; none when
    the claim was lost."""
    consumed, won, _ = _consuming()
    step = finish_step_statement().where(won).cte("step_ended")
    run = finish_run_statement().where(won).cte("run_ended")
    erased = (
        update(INTER).where(INTER.c.run_id == bindparam("rid"), INTER.c.secret.is_not(None), won).values(secret=None)
    ).cte("erased")
    # A parked step's resumption, the step's end, then the run's: of the consume's row and the run's end
    resuming, ended = consumed.c.kind == word(ContinuationKind.RESUME), run.c.id.is_not(None)
    known = {2: {"workflow": run.c.workflow}}
    events = events_if(resuming, true(), ended, known=known, source=consumed.outerjoin(run, true())).cte("events")
    return (
        select(consumed.c.id.label("consumed"), *(run.c[name] for name in RUN_RECORD_COLUMNS))
        .select_from(consumed.outerjoin(run, true()))
        .add_cte(step, erased, events)
    )


_CONSUME_AND_FINISH_RUN = DriverStatement(_consume_and_finish_run)


def consume_and_finish_run(
    session: Session | Connection,
    continuation_id: str,
    step: StepLike,
    *,
    status: RunStatus,
    execution_id: str,
    result: Any = None,
    error: str | None = None,
    error_details: Any = None,
) -> tuple[bool, RunRecord | None]:
    """``consume`` then ``finish_run`` in one statement (PostgreSQL), its events included: whether the
    consume won, and the run's terminal record (``None`` when the claim was lost or the run had already
    ended). A whole unit of work: run it in autocommit (``parkway.db.single_statement``)."""
    now = utcnow()
    params = {
        **{"cid": continuation_id, **finished_by(execution_id), "at": now, "sid": step.id, "rid": step.run_id},
        **{"step_to": STEP_OF_RUN[status].value, "to": status.value, "res": result, "err": error, "why": None},
        "det": error_details,
    }
    events = [
        resumed_event(step.run_id, step.id, step.name, continuation_id),
        *finish_events(step, status, execution_id, True, error=error, reason=None, error_details=error_details),
    ]
    row = _CONSUME_AND_FINISH_RUN.first(session, {**params, **event_params(events)})
    if row is None:
        return False, None
    return True, (RunRecord(*row[1:]) if row.id is not None else None)


def _erased_step_secrets(won: Any) -> Any:
    """The step ``:sid``'s sealed values -> NULL if the consume won (read once, by this continuation)."""
    return (
        update(INTER).where(INTER.c.step_id == bindparam("sid"), INTER.c.secret.is_not(None), won).values(secret=None)
    ).cte("erased")


def _consume_and_next_step() -> Any:
    consumed, won, resumed = _consuming()
    due, ctes = next_step_ctes(won, resumed)
    return (
        select(consumed.c.id.label("consumed"), due.c.id.label("due"), due.c.remote.label("due_remote"))
        .select_from(consumed.outerjoin(due, true()))
        .add_cte(_erased_step_secrets(won), *ctes)
    )


_CONSUME_AND_NEXT_STEP = DriverStatement(_consume_and_next_step)


def consume_and_next_step(
    session: Session | Connection,
    continuation_id: str,
    step: StepLike,
    *,
    execution_id: str,
    name: str,
    payload: Any,
) -> Due | None:
    """claimed -> consumed (as ``consume``), the step's sealed values erased and ``next_step``, in one
    statement: the continuation made due, or ``None`` when the claim was lost (nothing was written). Every
    write after the consume is conditional on it alone: a whole unit of work, fit for autocommit."""
    params, events, due = next_step_params(step, name=name, payload=payload)
    events.insert(0, resumed_event(step.run_id, step.id, step.name, continuation_id))
    params.update(cid=continuation_id, eid=execution_id, **event_params(events))
    row = _CONSUME_AND_NEXT_STEP.first(session, params)
    if row is None:
        return None
    if row.due is None:  # pragma: no cover - its inserts select from the consume's row
        raise RuntimeError(f"step {step.id}: consumed, yet the next step {name} was not made")
    return replace(due, remote=bool(row.due_remote))  # remote: leased, never published to Celery


@cache
def _consume_and_park(interactions: int, resumed_step: bool) -> DriverStatement:
    consumed, won, resumed = _consuming()
    parked, refusal, ctes = park_ctes(interactions, resumed_step, won, resumed)
    statement = (
        select(consumed.c.id.label("consumed"), parked.c.id.label("parked"), *(refusal.c[c] for c in REFUSAL_COLUMNS))
        .select_from(consumed.outerjoin(parked, true()).outerjoin(refusal, true()))
        .add_cte(_erased_step_secrets(won), *ctes)
    )
    return DriverStatement(lambda: statement)


def consume_and_park(
    session: Session | Connection,
    continuation_id: str,
    step: StepLike,
    *,
    execution_id: str,
    continuation: str,
    snapshot: Any,
    interactions: Sequence[InteractionSpec],
    from_continuation: bool,
) -> bool:
    """claimed -> consumed (as ``consume``), the step's sealed values erased and ``park`` (a resumed step's
    wait made on a new step), in one statement; ``False`` when the claim was lost (nothing was written).
    Run it in a transaction: a step that did not park raises (``ParkRefused`` for a park that addresses
    what it may not, as ``park``), and the consume rolls back with it."""
    params, events = park_params(step, continuation=continuation, snapshot=snapshot, interactions=interactions,
                                 resumed=from_continuation)  # fmt: skip
    events.insert(0, resumed_event(step.run_id, step.id, step.name, continuation_id))
    params.update(cid=continuation_id, eid=execution_id, **event_params(events))
    row = _consume_and_park(len(interactions), from_continuation).first(session, params)
    if row is None:
        return False
    refuse(row)
    if row.parked is None:  # pragma: no cover - the step is not running (interrupted meanwhile): roll back
        raise RuntimeError(f"step {step.id} is not running; cannot park")
    name_answerers(session, params["new_sid"], interactions)
    return True
