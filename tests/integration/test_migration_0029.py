"""Migration 0029 (a run's ``waiting -> running`` and a step's ``parked -> resuming`` derived from the wait's
continuation, no longer written by the answer) on a live deployment (issue 42).

A wait answered before the upgrade, through 0027's functions (its step stored ``resuming``, its run
``running``, its continuation ready and queued), reads the same after it and resumes exactly once; waits
answered after it store ``parked``/``waiting`` and read ``resuming``/``running`` all the same. The upgrade
adds and replaces functions only: it goes through while transactions hold every table an answer writes.
The downgrade stores the derived words, so 0027's functions find the due steps as they wrote them.
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks.sdk import answer
from tests.integration.helpers import (
    completed_resumed_once,
    live_head_db,  # noqa: F401 (the fixture head_db)
    parked,
    real_publishes,  # noqa: F401 (the fixture sent)
    step,
    upgrade_beside_answers,
)
from tests.support import HUMAN, Stack, new_response_id, run_row

FROM_REVISION = "0028"
FUNCTIONS = {"parkway_run_status", "parkway_step_status"}


def functions() -> set[str]:
    with transaction() as session:
        sql = "SELECT proname FROM pg_proc WHERE proname = ANY(:names)"
        return set(session.scalars(text(sql), {"names": sorted(FUNCTIONS)}))


def stored(run_id: str) -> tuple[str, str]:
    """The words stored for the run and its (first) step, as the transitions wrote them."""
    with transaction() as session:
        row = session.execute(
            text("SELECT r.status, s.status FROM runs r JOIN steps s ON s.run_id = r.id WHERE r.id = :r"), {"r": run_id}
        ).one()
        return row[0], row[1]


def shown(run_id: str, step_id: str) -> tuple[str, str]:
    """The run's and the step's status as every reader shows them."""
    return run_row(run_id).status, step(step_id).status


def test_migration_0029__a_wait_answered_before_it_reads_and_resumes_once_after_it(head_db: str, stack: Stack) -> None:
    # Given three waits parked, and the schema taken back to 0028 (0027's functions), whose functions answer the
    # first (with no worker running: its continuation ready, its message queued), writing the step's and the
    # run's words
    waits = {run_id: asked["go"].id for run_id, asked in (parked("t.ask_one") for _ in range(3))}
    stack.flush_broker()
    early, *late = waits
    reset_engine()
    command.downgrade(alembic_config(), FROM_REVISION)
    assert functions() == set()
    reset_engine()
    assert answer(waits[early], "before", response_id=new_response_id(), principal=HUMAN)["status"] == "answered"
    assert stored(early) == ("running", "resuming")
    steps = {run_id: _step_of(run_id) for run_id in waits}

    # When the database is upgraded to head, and the other two are answered with no worker running
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    assert functions() == FUNCTIONS
    assert shown(early, steps[early]) == ("running", "resuming")  # written the old way, read the same
    for run_id in late:
        assert shown(run_id, steps[run_id]) == ("waiting", "parked")
        receipt = answer(waits[run_id], "after", response_id=new_response_id(), principal=HUMAN)
        assert receipt["status"] == "answered"

    # Then the two answered after it store parked and waiting, and read resuming and running as the first does
    for run_id in late:
        assert stored(run_id) == ("waiting", "parked")
        assert shown(run_id, steps[run_id]) == ("running", "resuming")

    # And once a worker runs, each run completes, its body ran once, its resume consumed at the first attempt
    stack.start_worker()
    for run_id in waits:
        completed_resumed_once(run_id)
        assert shown(run_id, steps[run_id]) == ("completed", "completed")


def _step_of(run_id: str) -> str:
    with transaction() as session:
        return str(session.scalar(text("SELECT id FROM steps WHERE run_id = :r"), {"r": run_id}))


def test_migration_0029__the_downgrade_stores_what_was_derived(head_db: str) -> None:
    # Given a wait answered at head with no worker running: stored parked and waiting, read resuming and running
    run_id, asked = parked("t.ask_one")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    assert stored(run_id) == ("waiting", "parked")

    # When the schema is taken back to 0028 (0027's functions), the words those functions and reads expect are stored
    reset_engine()
    command.downgrade(alembic_config(), FROM_REVISION)
    assert functions() == set()
    assert stored(run_id) == ("running", "resuming")
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert shown(run_id, asked["go"].step_id) == ("running", "resuming")


def test_migration_0029__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision and a transaction holding every table an answer writes as a
    # writer does, when the upgrade runs beside it, then it completes while the writer is still open
    upgrade_beside_answers(FROM_REVISION)
    assert functions() == FUNCTIONS
