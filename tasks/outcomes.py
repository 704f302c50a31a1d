"""The checks a body's outcome (``models.outcome``: ``Park`` with its ``Question``s and ``Permission``s,
``Next``, ``Complete``, ``Fail``) passes before anything commits, whether a Python body returned it or a
remote worker sent it as JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from models.checks import interaction_specs, json_ok, text_ok
from models.outcome import Complete, Fail, Next, Outcome, Park, Permission, Question
from models.status import ContinuationKind
from parkway.errors import WorkflowError
from tasks import registry
from tasks.references import key_of

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


def _by_key(outcome: Park | Next, where: str) -> Park | Next:
    """The outcome with a function it references (``Next(execute)``, ``Park(continuation=decide)``) as its key."""
    try:
        if isinstance(outcome, Park) and callable(outcome.continuation):
            return replace(outcome, continuation=key_of(outcome.continuation, ContinuationKind.RESUME))
        if isinstance(outcome, Next) and callable(outcome.step):
            return replace(outcome, step=key_of(outcome.step, ContinuationKind.START))
        return outcome
    except WorkflowError as exc:
        raise WorkflowError(f"{type(outcome).__name__} from {where} names {exc}") from None


def check_outcome(outcome: Any, where: str, *, step_known: Callable[[str], bool] = registry.has_step) -> Outcome:
    """Check what a body returned before anything commits; raises ``WorkflowError`` when unusable.
    ``step_known``: whether a ``Next`` names a step that is run (by default: registered in this process)."""
    if isinstance(outcome, Park | Next):
        outcome = _by_key(outcome, where)
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
