"""Whether a step or a continuation version is run: by this process's registry, or by the fleet's live
workers, in Celery or remote (``store.serving``). What a start, a park from outside and a remote worker's
outcome are judged by (``sent_outcome``)."""

from __future__ import annotations

from models import checks, store
from models.outcome import Outcome, Park, Permission
from models.status import ContinuationKind
from parkway.db import single_statement
from parkway.errors import InvalidOutcome, WorkflowError
from tasks import registry
from tasks.outcomes import check_outcome


def step_served(name: str) -> bool:
    """A step this process runs (its ``PARKWAY_IMPORTS`` imported) or a live worker advertises."""
    if not registry.has_step(name):
        registry.import_workflows()  # a script that only set PARKWAY_IMPORTS has not imported them yet
    if registry.has_step(name):
        return True
    with single_statement() as conn:
        return store.serving(conn, ContinuationKind.START, name).served


def continuation_served(key: str) -> bool:
    """A continuation version a live worker advertises now (never this process's registry alone)."""
    with single_statement() as conn:
        return store.serving(conn, ContinuationKind.RESUME, key).served


def sent_outcome(outcome: Outcome, where: str) -> Outcome:
    """An outcome sent from outside Python (a remote worker's, or a park at a run's start), checked as a
    body's (``check_outcome``) against what the fleet serves: a ``Next`` to a step that is run, a ``Park`` on
    a version a live worker serves with quorums people could reach, no permission ``request_id`` (Parkway's
    own). Whom it addresses is the store's to judge as it commits (``store.park``: ``ParkRefused``, 403).
    Raises ``InvalidOutcome`` (422, nothing stored)."""
    try:
        check_outcome(outcome, where, step_known=step_served)
    except WorkflowError as exc:
        raise InvalidOutcome(str(exc)) from None
    if isinstance(outcome, Park):
        if any(isinstance(i, Permission) and i.request_id is not None for i in outcome.interactions):
            raise InvalidOutcome("a permission's request_id is set by Parkway, never sent")
        if not continuation_served(outcome.continuation):
            raise InvalidOutcome(f"continuation {outcome.continuation} is not served by any live worker",
                                 {"continuation": outcome.continuation})  # fmt: skip
        problem = unanswerable(outcome)
        if problem is not None:
            raise InvalidOutcome(problem)
    return outcome


def unanswerable(park: Park) -> str | None:
    """A sentence naming a wait of ``park`` that no one could ever answer (a quorum larger than who could
    ever answer: ``checks.unanswerable``); ``None`` when there is none."""
    with single_statement() as conn:
        return checks.unanswerable(conn, park.interactions)
