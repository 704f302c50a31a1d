"""Whether a step or a continuation version is run: by this process's registry, or by the fleet's live
workers, in Celery or remote (``store.serving``). What a start, a park from outside and a remote worker's
outcome are judged by."""

from __future__ import annotations

from models import store
from models.status import ContinuationKind
from parkway.db import single_statement
from tasks import registry


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
