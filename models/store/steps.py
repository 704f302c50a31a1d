"""A step's outcomes inside its consume: hand over to the next step, or park with its interactions.

Each is one statement of data-modifying CTEs, built once per shape (a park's per number of interactions)
and run on the driver (``DriverStatement``); its events are one insert, in the order they are listed. A
park's statement also reads whom it addresses (``_refusal``): every path that parks (a run's start, a
Python body, a remote worker's or a push handler's outcome) comes here, so the rule is checked once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from sqlalchemy import String, and_, bindparam, cast, exists, func, insert, literal, select, true, union_all, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.outcome import InteractionSpec
from models.status import ContinuationKind, InteractionStatus, RunStatus, StepStatus
from models.store.claims import StepRef
from models.store.driver import DriverStatement
from models.store.events import event_params, event_row, events_if
from models.store.principals import ANSWERERS, live_grant
from models.store.runs import Due, StepLike, ready_continuation
from models.store.sql import CONT, INTER, PRIN, RUN, STEP, TRACEPARENT, bp, new_id, word, words
from models.store.teams import name_answerers
from parkway.errors import ParkRefused

_AT = bp("at", STEP.c.updated_at)
# What a resumed step is stored as: parked (its continuation due makes it resuming), or resuming as 0027 wrote it
_RESUMED = (StepStatus.PARKED, StepStatus.RESUMING)
_STEP_REF = ("id", "run_id", "name", "payload", "snapshot")  # as StepRef's fields


def _step_completed(gate: Any, *from_: StepStatus) -> Any:
    """from -> completed for the step ``:sid`` with the result ``:res`` (its outcome is not read: the
    consume's CAS in the same transaction already proved this execution owns the step)."""
    return (
        update(STEP)
        .where(STEP.c.id == bindparam("sid"), STEP.c.status.in_(words(from_)), gate)
        .values(status=StepStatus.COMPLETED.value, result=bp("res", STEP.c.result), updated_at=_AT)
        .cte("step_completed")
    )


def _new_step(status: StepStatus, gate: Any, **values: Any) -> Any:
    """none -> ``status``: the step ``:new_sid`` of run ``:rid``, next in its sequence, named ``:name``."""
    next_seq = select(func.coalesce(func.max(STEP.c.seq), 0) + 1).where(STEP.c.run_id == bindparam("rid"))
    columns = {
        "id": bp("new_sid", STEP.c.id),
        "run_id": bp("rid", STEP.c.run_id),
        "seq": next_seq.scalar_subquery(),
        "name": bp("name", STEP.c.name),
        "status": literal(status.value, STEP.c.status.type),
        "payload": bp("payload", STEP.c.payload),
        "created_at": _AT,
        "updated_at": _AT,
        **values,
    }
    return insert(STEP).from_select(list(columns), select(*columns.values()).where(gate))


def next_step_ctes(gate: Any, *first: Any) -> tuple[Any, list[Any]]:
    """``next_step``'s writes, each only if ``gate`` holds, its events after ``first`` (conditions of
    ``events_if``): the continuation made due (a CTE to select from) and the other CTEs."""
    completed = _step_completed(gate, *_RESUMED, StepStatus.RUNNING)
    started = _new_step(StepStatus.RUNNING, gate).returning(STEP.c.id).cte("started")
    # A resumed step's run reads running since the answer (models/derived.py): now it is stored so
    running = (
        update(RUN)
        .where(RUN.c.id == bindparam("rid"), RUN.c.status == word(RunStatus.WAITING), gate)
        .values(status=RunStatus.RUNNING.value, updated_at=bp("at", RUN.c.updated_at))
        .cte("running")
    )
    due = (
        ready_continuation(ContinuationKind.START, bp("new_cid", CONT.c.id), bp("rid", CONT.c.run_id), started.c.id,
                           bp("name", CONT.c.name), started)
        .returning(CONT.c.id, CONT.c.remote)
        .cte("due")
    )  # fmt: skip
    events = events_if(*first, gate, exists(select(due.c.id))).cte("events")  # step.completed, continuation.ready
    return due, [completed, running, events]


def next_step_params(step: StepLike, *, name: str, payload: Any) -> tuple[dict[str, Any], list[dict[str, Any]], Due]:
    """What ``next_step_ctes`` binds (but its events), its events and the continuation it makes due."""
    due = Due(new_id(), ContinuationKind.START.value, step.run_id, new_id(), name)
    events = [
        event_row(due.run_id, "step.completed", step_id=step.id, name=step.name, next=name),
        event_row(due.run_id, "continuation.ready", continuation_id=due.id, step_id=due.step_id, name=name),
    ]
    params = {"sid": step.id, "rid": due.run_id, "new_sid": due.step_id, "new_cid": due.id, "name": name,
              "payload": payload, "res": {"next": name}, "at": utcnow()}  # fmt: skip
    return params, events, due


def _next_step() -> Any:
    due, ctes = next_step_ctes(true())
    return select(due.c.id, due.c.remote).add_cte(*ctes)


_NEXT_STEP = DriverStatement(_next_step)


def next_step(session: Session, step: StepLike, *, name: str, payload: Any) -> Due:
    """running|resuming -> completed for the step (a resuming one stored as parked), and a new step -> running
    with its ready continuation (the run, waiting as stored while its step resumed, -> running).

    One statement; the step's CAS is not a condition of the rest (the consume before it proved ownership)."""
    params, events, due = next_step_params(step, name=name, payload=payload)
    row = _NEXT_STEP.first(session, {**params, **event_params(events)})
    if row is None:  # pragma: no cover - never
        raise RuntimeError(f"step {step.id}: the next step {name} was not made")
    return replace(due, remote=bool(row.remote))


def _asked(parked: Any, k: int) -> Any:
    """Interaction ``k`` of a park (bound as ``i{k}_id``, ``i{k}_key``, ...), one row if the step parked."""
    return select(
        *(bp(f"i{k}_{name}", INTER.c[name]) for name in _SPEC_COLUMNS),
        parked.c.run_id,
        parked.c.id,
        literal(InteractionStatus.PENDING.value, INTER.c.status.type),
        db_now(f"i{k}_expires_in"),  # NULL seconds: no expiry; the database's clock
        db_now(),
        bp("cont", INTER.c.continuation),
        literal(k, INTER.c.position.type),  # its place in the Park: the step's prompts are listed in this order
        db_now(f"i{k}_remind_in"),  # the first reminder and escalation (NULL: none), as the expiry
        db_now(f"i{k}_escalate_in"),
        TRACEPARENT,  # the park's span: what resumes the wait links to it
    ).select_from(parked)


_SPEC_COLUMNS = (
    "id",
    "key",
    "kind",
    "prompt",
    "schema",
    "action",
    "resources",
    "sensitive",
    "target",
    "quorum",
    "team",
)
_INTERACTION_COLUMNS = [
    *_SPEC_COLUMNS,
    "run_id",
    "step_id",
    "status",
    "expires_at",
    "created_at",
    "continuation",
    "position",
    "remind_at",
    "escalate_at",
    "traceparent",
]


_OWNER = PRIN.alias("owner")


def _live_person(name: Any) -> Any:
    """Whether a live human or admin (who may answer) is named ``name`` (an expression)."""
    return exists().where(PRIN.c.name == name, PRIN.c.disabled_at.is_(None), PRIN.c.kind.in_(words(ANSWERERS)))


def _first_of(names: str, allowed: Any) -> Any:
    """The first of the bound list ``:names`` for which ``allowed(name)`` does not hold, or NULL."""
    listed = (
        func.unnest(cast(bindparam(names), ARRAY(String))).table_valued("name", with_ordinality="n").render_derived()
    )
    refused = select(listed.c.name).where(~allowed(listed.c.name)).order_by(listed.c.n).limit(1)
    return refused.scalar_subquery()


def _refusal() -> Any:
    """What the park of the run ``:rid`` may not address (``addressed``), one row: its owner's name, the
    first of ``:targets`` the owner holds no live grant on and the first of ``:people`` who is no live
    person (each NULL when there is none)."""
    return (
        select(
            _OWNER.c.name.label("owner"),
            _first_of("targets", lambda target: live_grant(RUN.c.owner_id, target)).label("refused_target"),
            _first_of("people", _live_person).label("refused_person"),
        )
        .select_from(RUN.join(_OWNER, _OWNER.c.id == RUN.c.owner_id))
        .where(RUN.c.id == bindparam("rid"))
        .cte("refusal")
    )


REFUSAL_COLUMNS = ("owner", "refused_target", "refused_person")


def park_ctes(interactions: int, resumed: bool, gate: Any, *first: Any) -> tuple[Any, Any, list[Any]]:
    """``park``'s writes, each only if ``gate`` holds and the park may address all it names, its events
    after ``first``: the parked step (a CTE of ``StepRef``'s columns, to select from), the ``refusal`` (a
    CTE of ``REFUSAL_COLUMNS``, to select from) and the other CTEs. The park of a running step ``:sid``
    (CAS running -> parked), or of a resuming one (``resumed``: it -> completed, and a new step
    ``:new_sid`` made parked); its ``interactions``, the run's CAS running -> waiting and the events, each
    only if the step parked."""
    refusal = _refusal()
    gate = and_(gate, exists(select(refusal.c.owner).where(refusal.c.refused_target.is_(None),
                                                             refusal.c.refused_person.is_(None))))  # fmt: skip
    snapshot = {"snapshot": bp("snap", STEP.c.snapshot), "continuation": bp("cont", STEP.c.continuation)}
    ctes = []
    if resumed:
        ctes.append(_step_completed(gate, *_RESUMED))
        parked = _new_step(StepStatus.PARKED, gate, **snapshot)
    else:
        parked = (
            update(STEP)
            .where(STEP.c.id == bindparam("sid"), STEP.c.status == word(StepStatus.RUNNING), gate)
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
    events = events_if(*first, *([gate] if resumed else []), won, *(won for _ in range(interactions)))
    return parked, refusal, [*ctes, waiting, events.cte("events")]


def addressed(specs: Sequence[InteractionSpec]) -> dict[str, list[str]]:
    """What a park's waits address, as ``_refusal`` binds it: every target (a wait's own, each escalation
    level's) and every person named (assignees, escalation levels' names), each once, in order."""
    targets: dict[str, None] = {}
    people: dict[str, None] = {}
    for spec in specs:
        targets[spec.target] = None
        people.update(dict.fromkeys(spec.assignees))
        for _, to in spec.escalate:
            if isinstance(to, str):
                targets[to] = None
            else:
                people.update(dict.fromkeys(to))
    return {"targets": list(targets), "people": list(people)}


def refuse(row: Any) -> None:
    """Raise ``ParkRefused`` when a row of a park's statement (its ``REFUSAL_COLUMNS``) names what the park
    may not address: nothing of it was written, and its transaction is to roll back."""
    if row.refused_target is not None:
        raise ParkRefused(f"principal {row.owner}, the run's owner, holds no grant on target {row.refused_target}:"
                          " a run's waits address only targets its owner is granted on")  # fmt: skip
    if row.refused_person is not None:
        raise ParkRefused(f"principal {row.refused_person} named by the park is not a live human or admin:"
                          " a wait names only people who may answer")  # fmt: skip


def park_params(
    step: StepLike, *, continuation: str, snapshot: Any, interactions: Sequence[InteractionSpec], resumed: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What ``park_ctes`` binds (but its events), and its events."""
    run_id = step.run_id
    parking = new_id() if resumed else step.id
    params: dict[str, Any] = {"sid": step.id, "new_sid": parking, "rid": run_id, "at": utcnow(), "snap": snapshot,
                              "cont": continuation, "name": continuation.split("@", 1)[0], "payload": None,
                              "res": {"parked": continuation}, **addressed(interactions)}  # fmt: skip
    events = [event_row(run_id, "step.completed", step_id=step.id, name=step.name)] if resumed else []
    parked_name = params["name"] if resumed else step.name
    events.append(event_row(run_id, "step.parked", step_id=parking, name=parked_name, continuation=continuation))
    for k, spec in enumerate(interactions):
        iid = spec.interaction_id(parking)
        values = {"id": iid, "key": spec.key, "kind": spec.kind, "prompt": spec.prompt, "schema": spec.schema,
                  "action": spec.action, "resources": spec.resources, "sensitive": list(spec.sensitive),
                  "target": spec.target, "expires_in": spec.expires_in or None, "quorum": spec.quorum,
                  "team": spec.team(), "remind_in": spec.remind_after[0] if spec.remind_after else None,
                  "escalate_in": spec.escalate[0][0] if spec.escalate else None}  # fmt: skip
        params.update({f"i{k}_{name}": value for name, value in values.items()})
        events.append(event_row(run_id, "interaction.asked", interaction_id=iid, step_id=parking, key=spec.key,
                                kind=spec.kind, target=spec.target))  # fmt: skip
    return params, events


@cache
def _park(interactions: int, resumed: bool) -> DriverStatement:
    parked, refusal, ctes = park_ctes(interactions, resumed, true())
    columns = [*(refusal.c[name] for name in REFUSAL_COLUMNS), *(parked.c[name] for name in _STEP_REF)]
    statement = select(*columns).select_from(refusal.outerjoin(parked, true())).add_cte(*ctes)
    return DriverStatement(lambda: statement)


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
    continuation). Raises ``ParkRefused`` (nothing written) when the park addresses a target the run's
    owner holds no live grant on, or names one who is no live person (``addressed``).
    """
    params, events = park_params(step, continuation=continuation, snapshot=snapshot, interactions=interactions,
                                 resumed=from_continuation)  # fmt: skip
    row = _park(len(interactions), from_continuation).first(session, {**params, **event_params(events)})
    if row is not None:
        refuse(row)
    if row is None or row.id is None:  # pragma: no cover - the consume CAS already proved this execution owns it
        raise RuntimeError(f"step {step.id} is not running; cannot park")
    name_answerers(session, params["new_sid"], interactions)
    return StepRef(*row[len(REFUSAL_COLUMNS) :])
