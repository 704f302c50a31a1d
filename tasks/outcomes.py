"""What a body returns (``Park`` with its ``Question``s and ``Permission``s, ``Next``, ``Complete``,
``Fail``) and the checks it passes before anything commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.answers import PERMISSION_SCHEMA
from models.jsonsafe import json_problem
from models.status import InteractionKind
from models.store import InteractionSpec
from parkway.errors import WorkflowError
from tasks import registry
from tasks.checks import expires_in_ok, schema_ok, text_ok
from tasks.teams import team_fields
from tasks.tooltypes import Permission


@dataclass(frozen=True)
class Question:
    key: str
    prompt: str
    schema: dict[str, Any]
    target: str
    expires_in: float | None = None
    sensitive: Sequence[str] = ()
    # Teams (docs/teams.md): as Permission's; the continuation gets every response (answers[key].responses).
    quorum: int = 1
    assignees: Sequence[str] = ()
    assignees_only: bool = False
    remind_after: Sequence[float] = ()
    escalate: Sequence[tuple[float, str | Sequence[str]]] = ()


@dataclass(frozen=True)
class Park:
    continuation: str
    interactions: Sequence[Question | Permission]
    snapshot: Any = None


@dataclass(frozen=True)
class Next:
    step: str
    payload: Any = None


@dataclass(frozen=True)
class Complete:
    result: Any = None


@dataclass(frozen=True)
class Fail:
    error: str
    details: Any = None


Outcome = Park | Next | Complete | Fail


def json_ok(value: Any, what: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise WorkflowError(f"{what} is not JSON-serializable ({problem})")


def interaction_specs(items: Sequence[Question | Permission]) -> list[InteractionSpec]:
    """Validate a Park's interactions; raises ``WorkflowError`` with a sentence naming the problem."""
    if not items:
        raise WorkflowError("Park needs at least one Question or Permission")
    specs: list[InteractionSpec] = []
    keys: set[str] = set()
    for item in items:
        if not isinstance(item, Question | Permission):
            raise WorkflowError(f"Park interactions must be Question or Permission, not {type(item).__name__}")
        text_ok(item.key, "an interaction key")
        if item.key in keys:
            raise WorkflowError(f"interaction key {item.key!r} is used twice in one Park")
        keys.add(item.key)
        if not item.target:
            raise WorkflowError(f"interaction {item.key} needs a target")
        text_ok(item.target, f"the target of interaction {item.key}")
        expires_in_ok(item.key, item.expires_in)
        if isinstance(item, Question):
            text_ok(item.prompt, f"the prompt of question {item.key}", max_len=None)
            schema_ok(item.key, item.schema)
            json_ok(list(item.sensitive), f"the sensitive fields of question {item.key}")
            specs.append(
                InteractionSpec(
                    key=item.key,
                    kind=InteractionKind.QUESTION,
                    target=item.target,
                    prompt=item.prompt,
                    schema=item.schema,
                    sensitive=list(item.sensitive),
                    expires_in=item.expires_in,
                    **team_fields(item, permission=False),
                )
            )
        else:
            resources = [str(r) for r in item.resources]
            if not resources or not item.action:
                raise WorkflowError(f"permission {item.key} needs an action and at least one resource")
            text_ok(item.action, f"the action of permission {item.key}")
            json_ok(resources, f"the resources of permission {item.key}")
            specs.append(
                InteractionSpec(
                    key=item.key,
                    kind=InteractionKind.PERMISSION,
                    target=item.target,
                    prompt=f"Allow {item.action} on {', '.join(resources)}?",
                    schema=PERMISSION_SCHEMA,
                    action=item.action,
                    resources=sorted(set(resources)),
                    expires_in=item.expires_in,
                    id=item.request_id,
                    **team_fields(item, permission=True),
                )
            )
    return specs


def check_outcome(outcome: Any, where: str) -> Outcome:
    """Check what a body returned before anything commits; raises ``WorkflowError`` when unusable."""
    if isinstance(outcome, Park):
        if not isinstance(outcome.continuation, str) or "@" not in outcome.continuation:
            raise WorkflowError(f"Park from {where} must name a continuation as name@version")
        text_ok(outcome.continuation, f"the continuation named by Park from {where}")
        json_ok(outcome.snapshot, "the Park snapshot")
        interaction_specs(outcome.interactions)  # its version is judged by the fleet (tasks.worker), not here
    elif isinstance(outcome, Next):
        if not isinstance(outcome.step, str) or not registry.has_step(outcome.step):
            raise WorkflowError(f"step {outcome.step} named by Next from {where} is not registered")
        json_ok(outcome.payload, "the Next payload")
    elif isinstance(outcome, Complete):
        json_ok(outcome.result, "the Complete result")
    elif isinstance(outcome, Fail):
        if not isinstance(outcome.error, str) or not outcome.error:
            raise WorkflowError(f"Fail from {where} needs an error text")
        text_ok(outcome.error, f"the error text of Fail from {where}", max_len=None)
        json_ok(outcome.details, "the Fail details")
    else:
        raise WorkflowError(f"{where} returned {type(outcome).__name__}; expected Park, Next, Complete or Fail")
    return outcome  # type: ignore[no-any-return]
