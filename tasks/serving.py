"""What a start and an outcome sent from outside Python are judged by: a gap in the fleet waits (the
sweep and the hand-on decide by ``models.served``), only a workflow no worker has ever run is unknown."""

from __future__ import annotations

from models import checks, store
from models.outcome import Outcome, Park, Permission
from models.status import ContinuationKind
from parkway.db import single_statement
from parkway.errors import InvalidOutcome, WorkflowError
from tasks import registry
from tasks.outcomes import check_outcome


def step_known(name: str) -> bool:
    """A step this process runs (its ``PARKWAY_IMPORTS`` imported) or some worker has ever advertised: a
    start of it waits for a worker that serves it; any other name is a typo."""
    if not registry.has_step(name):
        registry.import_workflows()  # a script that only set PARKWAY_IMPORTS has not imported them yet
    if registry.has_step(name):
        return True
    with single_statement() as conn:
        return store.ever_advertised(conn, ContinuationKind.START, name)


def sent_outcome(outcome: Outcome, where: str) -> Outcome:
    """An outcome sent from outside Python (a remote worker's, or a park at a run's start), checked as a
    body's (``check_outcome``): a ``Park`` with quorums people could reach and no permission ``request_id``
    (Parkway's own). What it names need not be served now: its work waits like any other. Whom it addresses
    is the store's to judge as it commits (``store.park``: ``ParkRefused``, 403). Raises ``InvalidOutcome``
    (422, nothing stored)."""
    try:
        check_outcome(outcome, where)
    except WorkflowError as exc:
        raise InvalidOutcome(str(exc)) from None
    if isinstance(outcome, Park):
        if any(isinstance(i, Permission) and i.request_id is not None for i in outcome.interactions):
            raise InvalidOutcome("a permission's request_id is set by Parkway, never sent")
        problem = unanswerable(outcome)
        if problem is not None:
            raise InvalidOutcome(problem)
    return outcome


def unanswerable(park: Park) -> str | None:
    """A sentence naming a wait of ``park`` that no one could ever answer (a quorum larger than who could
    ever answer: ``checks.unanswerable``); ``None`` when there is none."""
    with single_statement() as conn:
        return checks.unanswerable(conn, park.interactions)
