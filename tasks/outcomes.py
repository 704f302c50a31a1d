"""The checks a body's outcome (``models.outcome``: ``Park`` with its ``Question``s and ``Permission``s,
``Next``, ``Complete``, ``Fail``) passes before anything commits, whether a Python body returned it or a
remote worker sent it as JSON."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from models.checks import interaction_specs, json_ok, text_ok
from models.outcome import Complete, Fail, Next, Outcome, Park, Permission, Question
from models.status import ContinuationKind
from parkway.errors import WorkflowError
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


def check_outcome(outcome: Any, where: str) -> Outcome:
    """Check what a body returned before anything commits; raises ``WorkflowError`` when unusable. What a
    ``Park`` or ``Next`` names is judged by the fleet when its work is due (a gap waits; ``models.served``)."""
    if isinstance(outcome, Park | Next):
        outcome = _by_key(outcome, where)
    if isinstance(outcome, Park):
        if not isinstance(outcome.continuation, str) or "@" not in outcome.continuation:
            raise WorkflowError(f"Park from {where} must name a continuation as name@version")
        text_ok(outcome.continuation, f"the continuation named by Park from {where}")
        json_ok(outcome.snapshot, "the Park snapshot")
        interaction_specs(outcome.interactions)
    elif isinstance(outcome, Next):
        if not isinstance(outcome.step, str) or not outcome.step:
            raise WorkflowError(f"Next from {where} must name a step")
        text_ok(outcome.step, f"the step named by Next from {where}")
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
