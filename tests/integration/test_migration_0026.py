"""Migration 0026 (the event log as one row per statement and run) on a live deployment (issue 42 item 6).

Waits parked on the previous revision, one of them answered before the upgrade (its continuation ready,
its message queued), resume exactly once after it; the log written before reads as it did, each event at
its seq, and the events written after follow it in order, stored as batches. While a writer holds the log,
the upgrade gives up within its lock timeout, changing nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from models import event_log
from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks.sdk import answer
from tests.integration.helpers import (
    completed_resumed_once,
    database_at,
    parked_then_taken_back,
    upgrade_refused_while_held,
)
from tests.support import HUMAN, Stack, new_response_id

FROM_REVISION = "0025"


@pytest.fixture
def sent() -> None:
    """Publishes are real here (this package's ``sent`` records them instead): a worker consumes them."""


@pytest.fixture
def head_db(stack: Stack) -> Iterator[str]:
    """A database of its own at head with the test's actors (this code writes the columns of later revisions)."""
    with database_at(stack, "head", stack.setup_actors) as url:
        yield url


@pytest.fixture
def previous_db(stack: Stack) -> Iterator[str]:
    with database_at(stack, FROM_REVISION, stack.setup_actors) as url:
        yield url


def log_of(run_id: str) -> list[tuple[int, str]]:
    """The run's events as the API reads them: (seq, type), in order."""
    with transaction() as session:
        page = event_log.run_events(session, run_id, after=0, limit=1000)
        return [(e.seq, e.type) for e in page.items]


def stored_log(run_id: str) -> list[tuple[int, str]]:
    """The run's events as the relation ``events`` holds them, whichever the schema: (seq, type), in order."""
    with transaction() as session:
        sql = "SELECT seq, type FROM events WHERE run_id = :r ORDER BY seq"
        return [(s, t) for s, t in session.execute(text(sql), {"r": run_id})]


def is_table(name: str) -> bool:
    with transaction() as session:
        return session.scalar(text("SELECT relkind FROM pg_class WHERE relname = :n"), {"n": name}) == "r"


def batch_sizes(run_id: str) -> list[int]:
    """Per row of the run's log after 0026, in order: how many events it holds (0: a row of before)."""
    sql = "SELECT coalesce(json_array_length(events), 0) FROM event_batches WHERE run_id = :r ORDER BY first_seq"
    with transaction() as session:
        return list(session.scalars(text(sql), {"r": run_id}))


def test_migration_0026__waits_parked_before_it_resume_once_after_it_and_the_log_reads_on(
    head_db: str, stack: Stack
) -> None:
    # Given three waits parked, one answered with no worker running (its continuation ready, its message
    # queued), and the schema then taken back to the previous revision, as a deployment of it holds them
    waits, late = parked_then_taken_back(stack, FROM_REVISION)
    assert is_table("events")
    before = {run_id: stored_log(run_id) for run_id in waits}
    assert all(before.values())

    # When the database is upgraded to head, then a worker runs and the other two are answered
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    assert is_table("event_batches") and not is_table("events")
    assert {run_id: log_of(run_id) for run_id in waits} == before  # each event at its seq, as it was
    assert {run_id: stored_log(run_id) for run_id in waits} == before
    stack.start_worker()
    for run_id in late:
        answer(waits[run_id], "after", response_id=new_response_id(), principal=HUMAN)

    # Then each run completes, its continuation body ran once, and its log is the one before, then the
    # events after it, in order, each once; those after stored as batches
    for run_id in waits:
        completed_resumed_once(run_id)
        log = log_of(run_id)
        assert log[: len(before[run_id])] == before[run_id]
        assert [s for s, _ in log] == sorted({s for s, _ in log})
        after = [t for _, t in log[len(before[run_id]) :]]
        assert after.count("step.resumed") == 1 and after[-1] == "run.completed", after
        assert batch_sizes(run_id)[: len(before[run_id])] == [0] * len(before[run_id])
        assert all(k > 0 for k in batch_sizes(run_id)[len(before[run_id]) :])


def test_migration_0026__gives_up_within_its_lock_timeout_while_a_writer_holds_the_log(previous_db: str) -> None:
    # Given a transaction that may write events and is still open, when the upgrade runs beside it, it
    # fails on its lock timeout and changes nothing
    with upgrade_refused_while_held("events", FROM_REVISION):
        assert is_table("events")
    # Then once the writer has ended, the upgrade went through
    assert is_table("event_batches")
