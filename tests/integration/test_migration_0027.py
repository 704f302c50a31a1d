"""Migration 0027 (the answer and every closing of a wait as server-side functions) on a live deployment
(issue 42 item 2).

Waits parked on the previous revision, one of them answered before the upgrade (its continuation ready,
its message queued), resume exactly once after it, answered through the new functions. The upgrade adds
functions only: it goes through while transactions that write every table an answer writes are open, so
it holds nothing that stops an answer.
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tests.integration.helpers import (
    answered_after_upgrade,
    completed_resumed_once,
    live_head_db,  # noqa: F401 (the fixture head_db)
    parked_then_taken_back,
    real_publishes,  # noqa: F401 (the fixture sent)
    upgrade_beside_answers,
)
from tests.support import Stack

FROM_REVISION = "0026"
FUNCTIONS = {
    "parkway_answer",
    "parkway_close",
    "parkway_held_by_delegation",
    "parkway_place_of",
    "parkway_remote_only",
    "parkway_vouch",
}


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
    answered_after_upgrade(stack, waits, late)

    # Then each run completes, its continuation body ran once, its resume consumed at the first attempt
    for run_id in waits:
        completed_resumed_once(run_id)


def test_migration_0027__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision, when the upgrade runs beside a transaction holding every table
    # an answer writes, then it completes while that writer is still open, and the functions are there
    upgrade_beside_answers(FROM_REVISION)
    assert functions() == FUNCTIONS
