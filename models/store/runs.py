"""Runs: created with their first step, ended once (the terminal compare-and-set), interrupted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Protocol

from sqlalchemy import bindparam, exists, insert, literal, null, select, true, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from models.base import utcnow
from models.clock import db_now
from models.derived import run_status
from models.run_start import run_params, same_request
from models.status import RUN_LIVE, ContinuationKind, ContinuationStatus, RunStatus, StepStatus
from models.store.events import event_params, event_row, events_if
from models.store.sql import (
    CONT,
    INTER,
    RUN,
    STEP,
    TRACEPARENT,
    bp,
    by_name,
    insert_or_winner,
    insert_unless_taken,
    made_or_found,
    words,
)
from models.store.workers import remote_only
from models.tables import Principal, Run
from parkway import identity


def ready_continuation(
    kind: ContinuationKind,
    id_: Any,
    run_id: Any,
    step_id: Any,
    name: Any,
    source: Any = None,
    target: Any = None,
    published: bool = True,
) -> Any:
    """An insert of the ready continuation ``id_`` of ``kind`` (expressions for the rest), one for each row
    of ``source`` (a CTE; without one, a single row). ``target``: the run's, when the run is made in the same
    statement (else it is read). ``published=False``: never published, so the sweep's next pass sends it."""
    if target is None:
        target = select(RUN.c.target).where(RUN.c.id == run_id).scalar_subquery()
    row = select(
        id_,
        run_id,
        step_id,
        literal(kind.value),
        name,
        literal(ContinuationStatus.READY.value),
        literal(0),
        literal(int(published)),  # published right after this commit; if that publish is lost the sweep sends it again
        db_now() if published else null(),  # the re-enqueue age is measured on the database's clock
        db_now(),
        remote_only(kind, name, target),
        TRACEPARENT,
    )
    columns = [
        "id",
        "run_id",
        "step_id",
        "kind",
        "name",
        "status",
        "attempts",
        "publishes",
        "enqueued_at",
        "created_at",
        "remote",
        "traceparent",
    ]
    return insert(CONT).from_select(columns, row if source is None else row.select_from(source))


@cache
def _create_run(start: bool, published: bool = True) -> Any:
    """The run ``:id`` unless its owner used its idempotency key already, and only if it was made: its
    first step ``:sid``, that step's ready start continuation ``:cid`` and the two events (``start``), or
    the step alone and ``run.created`` (a run whose first step parks at once: ``create_parked_run``).
    ``published=False``: the continuation is left for the sweep to publish (``parkway run start``)."""
    at = bp("at", RUN.c.created_at)
    given = ("id", "workflow", "owner_id", "target", "payload", "idempotency_key", "request_digest")
    values = {name: bp(name, RUN.c[name]) for name in given}
    made = (
        insert_unless_taken(RUN, "owner_id", "idempotency_key")
        .values(**values, status=RunStatus.RUNNING.value, created_at=at, updated_at=at, projection_pending=False,
                projection_attempts=0)
        .returning(*RUN.c)
        .cte("run_made")
    )  # fmt: skip
    first_step = insert(STEP).from_select(
        ["id", "run_id", "seq", "name", "status", "payload", "created_at", "updated_at"],
        select(bp("sid", STEP.c.id), made.c.id, literal(1), made.c.workflow, literal(StepStatus.RUNNING.value),
               bp("payload", STEP.c.payload), at, at).select_from(made),
    )  # fmt: skip
    due = ready_continuation(ContinuationKind.START, bp("cid", CONT.c.id), made.c.id, bp("sid", CONT.c.step_id),
                             made.c.workflow, made, target=made.c.target, published=published)  # fmt: skip
    # run.created, continuation.ready
    events = events_if(*[exists(select(made.c.id))] * (2 if start else 1))
    # the run found as readers see it (its status through the rule, models/derived.py), in made's columns
    found = select(*(run_status(RUN).label("status") if c.name == "status" else c for c in RUN.c)).where(
        RUN.c.owner_id == values["owner_id"], RUN.c.idempotency_key == values["idempotency_key"]
    )
    ctes = [first_step.cte("first_step"), *([due.cte("due")] if start else []), events.cte("events")]
    return made_or_found(made, found).add_cte(*ctes)


# ``CREATE_UNPUBLISHED_RUN``: the statement whose text ``parkway run start`` runs (models/start_sql.py).
__getattr__ = by_name(CREATE_UNPUBLISHED_RUN=lambda: _create_run(True, published=False))


def create_run(
    session: Session,
    *,
    workflow: str,
    payload: Any,
    owner: Principal,
    target: str,
    idempotency_key: str | None,
    request_digest: str,
    start: bool = True,
) -> tuple[Run, Due | None]:
    """none -> running: a run, its first step and that step's ready continuation, in one statement
    (``start=False``: no continuation, the caller parks the step in this transaction; the ``Due`` then
    names the step to park and is not to be published).

    With an idempotency key already used by this owner (or by a concurrent request that commits first):
    the same body returns the existing run and ``None`` for the continuation; a different body raises
    ``Conflict``.
    """
    params = run_params(workflow=workflow, payload=payload, owner_id=owner.id, owner_name=owner.name,
                        target=target, idempotency_key=idempotency_key, digest=request_digest, start=start)  # fmt: skip
    run, made = insert_or_winner(
        session, Run, _create_run(start), params, lambda: _run_by_key(session, owner.id, idempotency_key)
    )
    if not made:
        same_request(run.id, run.status, run.idempotency_key, run.request_digest, request_digest)
        return run, None
    set_committed_value(run, "status", run.stored_status)  # just made: running, no step of it resumes yet
    rid, sid, cid = params["id"], params["sid"], params["cid"]
    remote = bool(start and session.scalar(select(CONT.c.remote).where(CONT.c.id == cid)))  # leased, not published
    return run, Due(cid, ContinuationKind.START.value, rid, sid, workflow, remote)


def _run_by_key(session: Session, owner_id: str, key: str | None) -> Run | None:
    if key is None:  # pragma: no cover - only a key can conflict
        return None
    return session.scalar(select(Run).where(Run.owner_id == owner_id, Run.idempotency_key == key))


@dataclass(frozen=True)
class Due:
    """A continuation made ready in this transaction: publish it once the transaction has committed."""

    id: str
    kind: str
    run_id: str
    step_id: str
    name: str
    remote: bool = False  # for remote workers' leases (where it is known): not to publish to Celery


class StepLike(Protocol):
    """What the outcome transitions need of a step: an ORM ``Step`` or the claim's ``StepRef``."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class RunRecord:
    """A run's canonical terminal record, as the terminal CAS returned it (what projections are made of)."""

    id: str
    workflow: str
    status: str
    completed_at: datetime | None
    finished_by: str | None
    warnings: Any
    error_details: Any = None  # a failed run's Fail details (its result is null)


@cache
def _erase_step_secrets() -> Any:
    return update(INTER).where(INTER.c.step_id == bindparam("sid"), INTER.c.secret.is_not(None)).values(secret=None)


@cache
def _erase_run_secrets() -> Any:
    return update(INTER).where(INTER.c.run_id == bindparam("rid"), INTER.c.secret.is_not(None)).values(secret=None)


def set_title(session: Session, run_id: str, title: str) -> bool:
    """live -> live with ``title``: what the run is about, as a step says it (in its commit); ``False`` once
    the run has ended (its title is kept as it ended)."""
    titled = session.execute(
        update(RUN)
        .where(RUN.c.id == run_id, RUN.c.status.in_(words(s.value for s in RUN_LIVE)))
        .values(title=title)
        .returning(RUN.c.id)
    ).first()
    return titled is not None


def erase_secrets(session: Session, *, step_id: str | None = None, run_id: str | None = None) -> int:
    """Sealed sensitive values -> NULL (ciphertext too), for a consumed step or an ended run."""
    if step_id is not None:
        result = session.execute(_erase_step_secrets(), {"sid": step_id})
    else:
        result = session.execute(_erase_run_secrets(), {"rid": run_id})
    return int(getattr(result, "rowcount", 0) or 0)


_STEP_ENDED = [StepStatus.RUNNING.value, StepStatus.RESUMING.value, StepStatus.PARKED.value]


@cache
def finish_step_statement() -> Any:
    return (
        update(STEP)
        .where(STEP.c.id == bindparam("sid"), STEP.c.status.in_(words(_STEP_ENDED)))
        .values(
            status=bindparam("step_to"),  # "to" is the run's status where both share a statement
            result=bp("res", STEP.c.result),
            error=bindparam("err"),
            reason=bindparam("why"),
            updated_at=bp("at", STEP.c.updated_at),
        )
    )


# As RunRecord's fields, in order.
RUN_RECORD_COLUMNS = ("id", "workflow", "status", "completed_at", "finished_by", "warnings", "error_details")


def finished_by(execution_id: str) -> dict[str, str]:
    """What ``finish_run_update`` binds of who ends the run: the execution, and this process as people read it."""
    return {"eid": execution_id, "eon": identity.label()}


def finish_run_update(run_id: Any, reason: Any = None) -> Any:
    """live -> terminal for the run ``run_id`` (an expression), its values bound as ``:to``, ``:res``,
    ``:err``, ``:det``, ``:at``, who ended it (``finished_by``) and its reason as ``:why`` (or the
    expression ``reason``); returns its ``RunRecord`` columns."""
    return (
        update(RUN)
        .where(RUN.c.id == run_id, RUN.c.status.in_(words(s.value for s in RUN_LIVE)))
        .values(
            status=bindparam("to"),
            result=bp("res", RUN.c.result),
            error=bindparam("err"),
            error_details=bp("det", RUN.c.error_details),
            reason=bindparam("why") if reason is None else reason,
            finished_by=bindparam("eid"),
            finished_on=bindparam("eon"),
            updated_at=bp("at", RUN.c.updated_at),
            completed_at=bp("at", RUN.c.completed_at),
        )
        .returning(*(RUN.c[name] for name in RUN_RECORD_COLUMNS))
    )


@cache
def finish_run_statement() -> Any:
    return finish_run_update(bindparam("rid"))


@cache
def _finish_run() -> Any:
    """``finish_step_statement()``, the run's terminal CAS, the run's sealed values erased
    and the events (the step's end; the run's only if this ended it), as one statement."""
    run = finish_run_statement().cte("run_ended")
    events = events_if(true(), exists(select(run.c.id)), known={1: {"workflow": run.c.workflow}}).cte("events")
    erased = _erase_run_secrets().cte("erased")
    return select(*(run.c[name] for name in RUN_RECORD_COLUMNS)).add_cte(
        finish_step_statement().cte("step_ended"), erased, events
    )


def finish_run(
    session: Session,
    step: StepLike,
    *,
    status: RunStatus,
    execution_id: str,
    result: Any = None,
    error: str | None = None,
    reason: str | None = None,
    error_details: Any = None,
) -> RunRecord | None:
    """The step -> its end status and the run: live -> terminal (written once, by CAS), in one
    statement (its schedule-history row is a view of it, 0028); returns that record, or ``None`` when the
    run was already terminal (a proven outcome is kept; the step's end and its event are still written)."""
    values = {"res": result, "err": error, "why": reason, "at": utcnow()}
    params = {"sid": step.id, "step_to": STEP_OF_RUN[status].value, "rid": step.run_id, "to": status.value,
              **finished_by(execution_id), "det": error_details, **values}  # fmt: skip
    events = finish_events(step, status, execution_id, True, error=error, reason=reason, error_details=error_details)
    row = session.execute(_finish_run(), {**params, **event_params(events)}).first()
    return None if row is None else RunRecord(*row)


STEP_OF_RUN = {
    RunStatus.COMPLETED: StepStatus.COMPLETED,
    RunStatus.FAILED: StepStatus.FAILED,
    RunStatus.INTERRUPTED: StepStatus.INTERRUPTED,
    RunStatus.CANCELED: StepStatus.CANCELED,
}


def finish_events(
    step: StepLike,
    status: RunStatus,
    execution_id: str,
    ended: bool,
    *,
    error: str | None,
    reason: str | None,
    error_details: Any = None,
) -> list[dict[str, Any]]:
    """The step's end and, when this ended the run, the run's: in that order."""
    step_status = STEP_OF_RUN[status].value
    events = [event_row(step.run_id, f"step.{step_status}", step_id=step.id, name=step.name)]
    if ended:
        data: dict[str, Any] = {"status": status.value, "execution_id": execution_id}
        if error is not None:
            data["error"] = error
        if error_details is not None:
            data["error_details"] = error_details
        if reason is not None:
            data["reason"] = reason
        events.append(event_row(step.run_id, f"run.{status.value}", **data))
    return events
