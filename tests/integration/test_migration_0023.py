"""Migration 0023 (the hot path's foreign keys dropped) on a live deployment (issue 42 item 6).

Waits parked on the previous revision, one of them answered before the upgrade (its
continuation ready, its message queued), resume exactly once after it; and while a writer holds the tables,
the upgrade gives up within its lock timeout, changing nothing, instead of queueing a lock that would hold
every answer behind it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks.sdk import answer
from tests.integration.helpers import completed_resumed_once, database_at, parked, upgrade_refused_while_held
from tests.support import HUMAN, Stack, event_types, new_response_id

FROM_REVISION = "0022"
_FOREIGN_KEYS = "SELECT conname FROM pg_constraint WHERE contype = 'f' AND conrelid::regclass::text = ANY(:tables)"
HOT_TABLES = ["events", "continuations", "schedule_history"]


@pytest.fixture
def sent() -> None:
    """Publishes are real here (this package's ``sent`` records them instead): a worker consumes them."""


@pytest.fixture
def previous_db(stack: Stack) -> Iterator[str]:
    """A database of its own at ``FROM_REVISION`` with the test's actors; the stack points at it."""
    with database_at(stack, FROM_REVISION, stack.setup_actors) as url:
        yield url


@pytest.fixture
def head_db(stack: Stack) -> Iterator[str]:
    """A database of its own at head with the test's actors (this code writes the columns of later revisions)."""
    with database_at(stack, "head", stack.setup_actors) as url:
        yield url


def foreign_keys() -> set[str]:
    with transaction() as session:
        return set(session.scalars(text(_FOREIGN_KEYS), {"tables": HOT_TABLES}))


def test_migration_0023__waits_parked_before_it_resume_once_after_it(head_db: str, stack: Stack) -> None:
    # Given three waits parked (their start run in this process: a worker of this code refuses an older
    # schema), one answered with no worker running (its continuation ready and its message queued), and the
    # schema then taken back to the previous revision, as a deployment of it holds them (this code writes
    # columns of revisions after 0023, so it cannot park on 0022 itself)
    waits = {run_id: asked["go"].id for run_id, asked in (parked("t.ask_one") for _ in range(3))}
    stack.flush_broker()  # the start messages, consumed already
    early, *late = waits
    answer(waits[early], "before", response_id=new_response_id(), principal=HUMAN)
    reset_engine()
    command.downgrade(alembic_config(), FROM_REVISION)
    assert foreign_keys() == {"fk_events_run_id_runs", "fk_continuations_run_id_runs",
                              "fk_continuations_step_id_steps", "fk_schedule_history_run_id_runs"}  # fmt: skip

    # When the database is upgraded to head, then a worker runs and the other two are answered
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    assert foreign_keys() == set()
    stack.start_worker()
    for run_id in late:
        answer(waits[run_id], "after", response_id=new_response_id(), principal=HUMAN)

    # Then each run completes, its continuation body ran once and its log holds each event once
    for run_id in waits:
        completed_resumed_once(run_id)
        types = event_types(run_id)
        assert [t for t in types if t in ("step.resumed", "run.completed")] == ["step.resumed", "run.completed"]


def test_migration_0023__gives_up_within_its_lock_timeout_while_a_writer_holds_the_tables(previous_db: str) -> None:
    # Given a transaction that has written an event and is still open, when the upgrade runs beside it, it
    # fails on its lock timeout and changes nothing
    with upgrade_refused_while_held("events", FROM_REVISION):
        assert "fk_events_run_id_runs" in foreign_keys()
    # Then once the writer has ended, the upgrade went through
    assert foreign_keys() == set()
