"""Migration 0028 (the projection cursor; ``schedule_history`` a view of the terminal runs) on a live
deployment (issue 42).

Waits parked on the previous revision, one of them answered before the upgrade (its continuation ready,
its message queued), resume exactly once after it, and their projections converge with no flag cleared. A
run whose projection was still pending before it (its file never written, its history row stale) converges
after it at the next sweep. The upgrade takes no lock of a table an answer writes, and waits at most its
lock timeout for the old history table a terminal commit of the previous revision writes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from alembic import command
from sqlalchemy import text

from models.tables import ScheduleHistory
from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks import projection
from tests.integration.helpers import (
    answered_after_upgrade,
    completed_resumed_once,
    live_head_db,  # noqa: F401 (the fixture head_db)
    parked_then_taken_back,
    real_publishes,  # noqa: F401 (the fixture sent)
    upgrade_beside_answers,
    upgrade_refused_while_held,
)
from tests.support import Stack, run_row, wait_for

FROM_REVISION = "0027"
PENDING_RUN = "m0028-pending"


def _relkind(name: str) -> str | None:
    with transaction() as session:
        kind = session.scalar(text("SELECT relkind::text FROM pg_class WHERE relname = :n"), {"n": name})
        return str(kind) if kind is not None else None


def _ended_unprojected_at_0027() -> datetime:
    """A completed run as the previous revision leaves one whose file could not be written yet: its flag set,
    its history row written with the record (here a stale one, of another execution). Returns its end."""
    at = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    with transaction() as session:
        session.execute(
            text(
                "INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                "completed_at, finished_by, projection_pending) SELECT :id, 't.after', 'completed', id, 'team:ops', "
                "'{}', :at, :at, :at, 'exec-0027', true FROM principals ORDER BY id LIMIT 1"
            ),
            {"id": PENDING_RUN, "at": at},
        )
        session.execute(
            text(
                "INSERT INTO schedule_history (run_id, workflow, status, completed_at, execution_id, recorded_at) "
                "VALUES (:id, 't.after', 'completed', :at, 'another-execution', :at)"
            ),
            {"id": PENDING_RUN, "at": at},
        )
    return at


def _agrees(run_id: str) -> None:
    """Every projection of the run agrees with its record, and nothing says it is pending."""
    run = run_row(run_id)
    assert run.completed_at is not None and not run.projection_pending
    written = json.loads(projection.metadata_path(run_id).read_text())
    assert (written["status"], written["completed_at"], written["execution_id"]) == (
        run.status,
        run.completed_at.isoformat(),
        run.finished_by,
    )
    with transaction() as session:
        history = session.get(ScheduleHistory, run_id)
        assert history is not None
        assert (history.status, history.completed_at, history.execution_id) == (
            run.status,
            run.completed_at,
            run.finished_by,
        )


def test_migration_0028__waits_parked_before_it_resume_once_after_it_and_pending_projections_converge(
    head_db: str, stack: Stack
) -> None:
    # Given three waits parked, one answered with no worker running (its continuation ready, its message
    # queued), the schema then taken back to the previous revision, as a deployment of it holds them, and a
    # run that revision ended without writing its file yet (its history row stale)
    waits, late = parked_then_taken_back(stack, FROM_REVISION)
    assert _relkind("schedule_history") == "r" and _relkind("projection_cursor") is None
    ended_at = _ended_unprojected_at_0027()

    # When the database is upgraded to head, then a worker runs and the other two are answered
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    assert _relkind("schedule_history") == "v"
    answered_after_upgrade(stack, waits, late)

    # Then each run completes, its continuation body ran once, its resume consumed at the first attempt, and
    # its projections agree with no failure recorded (the cursor passed it)
    for run_id in waits:
        completed_resumed_once(run_id)
        wait_for(lambda run_id=run_id: not run_row(run_id).projection_pending, what="the cursor past the run")
        _agrees(run_id)
        assert not run_row(run_id).projection_failed

    # And the run pending before the upgrade converges at a sweep (the worker's first, or the next): its file
    # written, its history the record's (a view), nothing pending
    wait_for(lambda: not run_row(PENDING_RUN).projection_pending, sweep=True, what="the pending run converged")
    _agrees(PENDING_RUN)
    assert run_row(PENDING_RUN).completed_at == ended_at


def test_migration_0028__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision, when the upgrade runs beside a transaction holding every table
    # an answer writes, then it completes while that writer is still open: the history is a view
    upgrade_beside_answers(FROM_REVISION)
    assert _relkind("schedule_history") == "v"


def test_migration_0028__gives_up_within_its_lock_timeout_while_a_terminal_commit_holds_the_history(
    head_db: str,
) -> None:
    # Given the schema at the previous revision, whose terminal commits write the history table
    reset_engine()
    command.downgrade(alembic_config(), FROM_REVISION)
    # When a transaction holds that table as such a commit does, then the upgrade fails on its lock timeout,
    # changing nothing; once the writer ends it goes through
    with upgrade_refused_while_held("schedule_history", FROM_REVISION):
        assert _relkind("schedule_history") == "r" and _relkind("projection_cursor") is None
    assert _relkind("schedule_history") == "v"
