"""The checks a body's outcome (``models.outcome``: ``Park`` with its ``Question``s and ``Permission``s,
``Next``, ``Complete``, ``Fail``) passes before anything commits, whether a Python body returned it or a
remote worker sent it as JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from models.answers import PERMISSION_SCHEMA
from models.jsonsafe import json_problem
from models.outcome import Complete, Fail, Next, Outcome, Park, Permission, Question
from models.status import InteractionKind
from models.store import InteractionSpec
from parkway.errors import WorkflowError
from tasks import registry
from tasks.checks import expires_in_ok, schema_ok, text_ok

__all__ = [
    "Complete",
    "Fail",
    "Next",
    "Outcome",
    "Park",
    "Permission",
    "Question",
    "check_outcome",
    "interaction_specs",
]


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
                )
            )
    return specs


def check_outcome(outcome: Any, where: str, *, step_known: Callable[[str], bool] = registry.has_step) -> Outcome:
    """Check what a body returned before anything commits; raises ``WorkflowError`` when unusable.
    ``step_known``: whether a ``Next`` names a step that is run (by default: registered in this process)."""
    if isinstance(outcome, Park):
        if not isinstance(outcome.continuation, str) or "@" not in outcome.continuation:
            raise WorkflowError(f"Park from {where} must name a continuation as name@version")
        text_ok(outcome.continuation, f"the continuation named by Park from {where}")
        json_ok(outcome.snapshot, "the Park snapshot")
        interaction_specs(outcome.interactions)  # its version is judged by the fleet (tasks.worker), not here
    elif isinstance(outcome, Next):
        if not isinstance(outcome.step, str) or not step_known(outcome.step):
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
