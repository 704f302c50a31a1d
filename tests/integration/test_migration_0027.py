"""Migration 0027 (the answer and every closing of a wait as server-side functions) on a live deployment
(issue 42 item 2).

Waits parked on the previous revision, one of them answered before the upgrade (its continuation ready,
its message queued), resume exactly once after it, answered through the new functions. The upgrade adds
functions only: it goes through while transactions that write every table an answer writes are open, so
it holds nothing that stops an answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks.sdk import answer
from tests.integration.helpers import (
    completed_resumed_once,
    database_at,
    parked_then_taken_back,
    upgrades_beside_writers,
)
from tests.support import HUMAN, Stack, new_response_id

FROM_REVISION = "0026"
FUNCTIONS = {
    "parkway_answer",
    "parkway_close",
    "parkway_held_by_delegation",
    "parkway_place_of",
    "parkway_remote_only",
    "parkway_vouch",
}
# What an answer writes (or locks): an upgrade must not wait for any of them.
ANSWER_TABLES = ("interactions", "steps", "runs", "continuations", "event_batches", "principals")


@pytest.fixture
def sent() -> None:
    """Publishes are real here (this package's ``sent`` records them instead): a worker consumes them."""


@pytest.fixture
def head_db(stack: Stack) -> Iterator[str]:
    """A database of its own at head with the test's actors (this code writes the columns of later revisions)."""
    with database_at(stack, "head", stack.setup_actors) as url:
        yield url


def functions() -> set[str]:
    with transaction() as session:
        sql = "SELECT proname FROM pg_proc WHERE proname = ANY(:names)"
        return set(session.scalars(text(sql), {"names": sorted(FUNCTIONS)}))


def test_migration_0027__waits_parked_before_it_resume_once_after_it(head_db: str, stack: Stack) -> None:
    # Given three waits parked, one answered with no worker running (its continuation ready, its message
    # queued), and the schema then taken back to the previous revision, as a deployment of it holds them
    waits, late = parked_then_taken_back(stack, FROM_REVISION)
    assert functions() == set()

    # When the database is upgraded to head, then a worker runs and the other two are answered
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    assert functions() == FUNCTIONS
    stack.start_worker()
    for run_id in late:
        receipt = answer(waits[run_id], "after", response_id=new_response_id(), principal=HUMAN)
        assert receipt["status"] == "answered"

    # Then each run completes, its continuation body ran once, its resume consumed at the first attempt
    for run_id in waits:
        completed_resumed_once(run_id)


def test_migration_0027__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision and a transaction holding every table an answer writes as a
    # writer does, when the upgrade runs beside it, then it completes while the writer is still open
    upgrades_beside_writers(FROM_REVISION, ANSWER_TABLES)
    assert functions() == FUNCTIONS
