"""A step's outcomes inside its consume: hand over to the next step, or park with its interactions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.clock import db_now
from models.status import ContinuationKind, InteractionStatus, RunStatus, StepStatus
from models.store.events import append_event
from models.store.runs import Due, StepLike, insert_continuation, insert_step, set_run_status, set_step_status
from models.store.sql import interaction_id
from models.tables import Interaction, Step


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


def next_step(session: Session, step: StepLike, *, name: str, payload: Any) -> Due:
    """running|resuming -> completed for the step, and a new step -> running with its ready continuation."""
    set_step_status(
        session, step.id, [StepStatus.RUNNING, StepStatus.RESUMING], StepStatus.COMPLETED, result={"next": name}
    )
    append_event(session, step.run_id, "step.completed", step_id=step.id, name=step.name, next=name)
    new = insert_step(session, step.run_id, seq=_next_seq(session, step.run_id), name=name, payload=payload)
    return insert_continuation(session, step.run_id, new.id, ContinuationKind.START, name)


def _next_seq(session: Session, run_id: str) -> int:
    current = session.scalar(select(Step.seq).where(Step.run_id == run_id).order_by(Step.seq.desc()).limit(1))
    return (current or 0) + 1


def park(
    session: Session,
    step: StepLike,
    *,
    continuation: str,
    snapshot: Any,
    interactions: Sequence[InteractionSpec],
    from_continuation: bool,
) -> Step:
    """running -> parked with all its interactions at once, and the run running -> waiting (a resuming step
    -> completed first, the wait made on a new step).

    A continuation that parks again does so as a new step (every wait has its own step and at most one
    continuation).
    """
    if from_continuation:
        set_step_status(session, step.id, [StepStatus.RESUMING], StepStatus.COMPLETED, result={"parked": continuation})
        append_event(session, step.run_id, "step.completed", step_id=step.id, name=step.name)
        step = insert_step(
            session, step.run_id, seq=_next_seq(session, step.run_id), name=continuation.split("@", 1)[0], payload=None
        )
    parked = set_step_status(
        session, step.id, [StepStatus.RUNNING], StepStatus.PARKED, snapshot=snapshot, continuation=continuation
    )
    if parked is None:  # pragma: no cover - the consume CAS already proved this execution owns the step
        raise RuntimeError(f"step {step.id} is not running; cannot park")
    for spec in interactions:
        row = Interaction(
            id=spec.interaction_id(step.id),
            run_id=step.run_id,
            step_id=step.id,
            key=spec.key,
            kind=spec.kind,
            prompt=spec.prompt,
            schema=spec.schema,
            action=spec.action,
            resources=spec.resources,
            sensitive=list(spec.sensitive),
            target=spec.target,
            status=InteractionStatus.PENDING,
            expires_at=db_now(spec.expires_in) if spec.expires_in else None,  # the database's clock
            created_at=db_now(),
        )
        session.add(row)
    session.flush()
    append_event(session, step.run_id, "step.parked", step_id=step.id, continuation=continuation)
    for spec in interactions:
        iid = spec.interaction_id(step.id)
        append_event(
            session,
            step.run_id,
            "interaction.asked",
            interaction_id=iid,
            step_id=step.id,
            key=spec.key,
            kind=spec.kind,
            target=spec.target,
        )
    set_run_status(session, step.run_id, [RunStatus.RUNNING], RunStatus.WAITING)
    return parked
