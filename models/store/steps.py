"""A step's outcomes inside its consume: hand over to the next step, or park with its interactions.

Each is one statement of data-modifying CTEs, built once per shape (a park's per number of interactions)
and run on the driver (``DriverStatement``); its events are one insert, in the order they are listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import bindparam, exists, func, insert, literal, select, true, union_all, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.status import ContinuationKind, InteractionStatus, RunStatus, StepStatus
from models.store.claims import StepRef
from models.store.driver import DriverStatement
from models.store.events import event_params, event_row, events_if
from models.store.runs import Due, StepLike, ready_continuation
from models.store.sql import CONT, INTER, RUN, STEP, bp, interaction_id, new_id, word, words


@dataclass
class InteractionSpec:
    """A validated interaction to create when a step parks."""

    key: str
    kind: str
    target: str
    prompt: str | None = None
    schema: Any = None
    action: str | None = None
    resources: list[str] | None = None
    sensitive: list[str] = field(default_factory=list)
    expires_in: float | None = None
    id: str | None = None  # a deterministic id chosen by the caller (tool permission requests)

    def interaction_id(self, step_id: str) -> str:
        return self.id or interaction_id(step_id, self.key, self.kind, self.resources)


_AT = bp("at", STEP.c.updated_at)
_STEP_REF = ("id", "run_id", "name", "payload", "snapshot")  # as StepRef's fields


def _step_completed(*from_: StepStatus) -> Any:
    """from -> completed for the step ``:sid`` with the result ``:res`` (its outcome is not read: the
    consume's CAS in the same transaction already proved this execution owns the step)."""
    return (
        update(STEP)
        .where(STEP.c.id == bindparam("sid"), STEP.c.status.in_(words(from_)))
        .values(status=StepStatus.COMPLETED.value, result=bp("res", STEP.c.result), updated_at=_AT)
        .cte("step_completed")
    )


def _new_step(status: StepStatus, **values: Any) -> Any:
    """none -> ``status``: the step ``:new_sid`` of run ``:rid``, next in its sequence, named ``:name``."""
    next_seq = select(func.coalesce(func.max(STEP.c.seq), 0) + 1).where(STEP.c.run_id == bindparam("rid"))
    return insert(STEP).values(
        id=bindparam("new_sid"),
        run_id=bindparam("rid"),
        seq=next_seq.scalar_subquery(),
        name=bindparam("name"),
        status=status.value,
        payload=bp("payload", STEP.c.payload),
        created_at=_AT,
        updated_at=_AT,
        **values,
    )


def _next_step() -> Any:
    """The step's CAS, the new step, its ready start continuation ``:cid`` and the two events."""
    completed = _step_completed(StepStatus.RUNNING, StepStatus.RESUMING)
    started = _new_step(StepStatus.RUNNING).cte("started")
    due = (
        ready_continuation(ContinuationKind.START, bp("rid", CONT.c.run_id), bp("new_sid", CONT.c.step_id),
                           bp("name", CONT.c.name))
        .returning(CONT.c.id)
        .cte("due")
    )  # fmt: skip
    events = events_if(true(), true()).cte("events")  # step.completed, continuation.ready
    return select(due.c.id).add_cte(completed, started, events)


_NEXT_STEP = DriverStatement(_next_step())


def next_step(session: Session, step: StepLike, *, name: str, payload: Any) -> Due:
    """running|resuming -> completed for the step, and a new step -> running with its ready continuation.

    One statement; the step's CAS is not a condition of the rest (the consume before it proved ownership)."""
    new_sid, cid, run_id = new_id(), new_id(), step.run_id
    events = [
        event_row(run_id, "step.completed", step_id=step.id, name=step.name, next=name),
        event_row(run_id, "continuation.ready", continuation_id=cid, step_id=new_sid, name=name),
    ]
    params = {"sid": step.id, "rid": run_id, "new_sid": new_sid, "cid": cid, "name": name, "payload": payload,
              "res": {"next": name}, "at": utcnow(), **event_params(events)}  # fmt: skip
    if _NEXT_STEP.first(session, params) is None:  # pragma: no cover - an insert of VALUES inserts or raises
        raise RuntimeError(f"step {step.id}: the next step {name} was not made")
    return Due(cid, ContinuationKind.START.value, run_id, new_sid, name)


def _asked(parked: Any, k: int) -> Any:
    """Interaction ``k`` of a park (bound as ``i{k}_id``, ``i{k}_key``, ...), one row if the step parked."""
    columns = {name: bp(f"i{k}_{name}", INTER.c[name]) for name in _SPEC_COLUMNS}
    return select(
        *columns.values(),
        parked.c.run_id,
        parked.c.id,
        literal(InteractionStatus.PENDING.value, INTER.c.status.type),
        db_now(f"i{k}_expires_in"),  # NULL seconds: no expiry; the database's clock
        db_now(),
    ).select_from(parked)


_SPEC_COLUMNS = ("id", "key", "kind", "prompt", "schema", "action", "resources", "sensitive", "target")
_INTERACTION_COLUMNS = [*_SPEC_COLUMNS, "run_id", "step_id", "status", "expires_at", "created_at"]


@cache
def _park(interactions: int, resumed: bool) -> DriverStatement:
    """The park of a running step ``:sid`` (CAS running -> parked), or of a resuming one (``resumed``: it
    -> completed, and a new step ``:new_sid`` made parked); its ``interactions``, the run's CAS running ->
    waiting and the events, each only if the step parked. Returns the parked step (none if it did not)."""
    snapshot = {"snapshot": bp("snap", STEP.c.snapshot), "continuation": bindparam("cont")}
    ctes = []
    if resumed:
        ctes.append(_step_completed(StepStatus.RESUMING))
        parked = _new_step(StepStatus.PARKED, **snapshot)
    else:
        parked = (
            update(STEP)
            .where(STEP.c.id == bindparam("sid"), STEP.c.status == word(StepStatus.RUNNING))
            .values(status=StepStatus.PARKED.value, updated_at=_AT, **snapshot)
        )
    parked = parked.returning(*(STEP.c[name] for name in _STEP_REF)).cte("parked")
    won = exists(select(parked.c.id))
    rows = [_asked(parked, k) for k in range(interactions)]
    if rows:
        ctes.append(insert(INTER).from_select(_INTERACTION_COLUMNS, union_all(*rows) if len(rows) > 1 else rows[0])
                    .cte("asked"))  # fmt: skip
    waiting = (
        update(RUN)
        .where(RUN.c.id == bindparam("rid"), RUN.c.status == word(RunStatus.RUNNING), won)
        .values(status=RunStatus.WAITING.value, updated_at=bp("at", RUN.c.updated_at))
        .cte("waiting")
    )
    # step.completed (a resumed step's, whatever its CAS did), step.parked, then each interaction.asked
    events = events_if(*([true()] if resumed else []), won, *(won for _ in range(interactions))).cte("events")
    return DriverStatement(select(*(parked.c[name] for name in _STEP_REF)).add_cte(*ctes, waiting, events))


def park(
    session: Session,
    step: StepLike,
    *,
    continuation: str,
    snapshot: Any,
    interactions: Sequence[InteractionSpec],
    from_continuation: bool,
) -> StepRef:
    """running -> parked with all its interactions at once, and the run running -> waiting (a resuming step
    -> completed first, the wait made on a new step): one statement. Returns the parked step.

    A continuation that parks again does so as a new step (every wait has its own step and at most one
    continuation).
    """
    run_id, now = step.run_id, utcnow()
    parking = new_id() if from_continuation else step.id
    params: dict[str, Any] = {"sid": step.id, "new_sid": parking, "rid": run_id, "at": now, "snap": snapshot,
                              "cont": continuation, "name": continuation.split("@", 1)[0], "payload": None,
                              "res": {"parked": continuation}}  # fmt: skip
    events = [event_row(run_id, "step.completed", step_id=step.id, name=step.name)] if from_continuation else []
    events.append(event_row(run_id, "step.parked", step_id=parking, continuation=continuation))
    for k, spec in enumerate(interactions):
        iid = spec.interaction_id(parking)
        values = {"id": iid, "key": spec.key, "kind": spec.kind, "prompt": spec.prompt, "schema": spec.schema,
                  "action": spec.action, "resources": spec.resources, "sensitive": list(spec.sensitive),
                  "target": spec.target, "expires_in": spec.expires_in or None}  # fmt: skip
        params.update({f"i{k}_{name}": value for name, value in values.items()})
        events.append(event_row(run_id, "interaction.asked", interaction_id=iid, step_id=parking, key=spec.key,
                                kind=spec.kind, target=spec.target))  # fmt: skip
    row = _park(len(interactions), from_continuation).first(session, {**params, **event_params(events)})
    if row is None:  # pragma: no cover - the consume CAS already proved this execution owns the step
        raise RuntimeError(f"step {step.id} is not running; cannot park")
    return StepRef(*row)
