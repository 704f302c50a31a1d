"""An answer reads its own step's interactions, however many others are pending.

PostgreSQL plans the answer's compare-and-set once per connection (a generic plan), from the statistics of
that moment. Before the table's first ANALYZE (a new database, a burst of new waits before autovacuum
came by), the partial index of pending interactions looked empty, and the plan scanned all of it for the
one row by id: every answer then read every pending interaction. The blocks an answer reads of
``interactions`` are counted by PostgreSQL's own statistics, not timed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from models import store
from parkway.db import reset_engine, transaction
from tasks.sdk import response_digest
from tests.integration.helpers import parked
from tests.support import HUMAN, new_response_id, wait_for

BURST = 150  # questions made pending after the first answer


def _interaction_blocks(session: Any) -> int:
    return int(
        session.execute(
            text(
                "SELECT coalesce(heap_blks_hit + heap_blks_read + idx_blks_hit + idx_blks_read, 0) "
                "FROM pg_statio_user_tables WHERE relname = 'interactions'"
            )
        ).scalar_one()
    )


def _no_other_backend() -> bool:
    with transaction() as session:
        others = session.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        ).scalar_one()
    return others == 0


def _blocks_read_by_answer(interaction_id: str) -> int:
    """Answer as ana under a generic plan (prepared at once, as a pooled connection's statements are after
    a few runs); how many blocks of ``interactions`` and its indexes the answer's transaction read.

    A backend reports its counts when idle, at most once a second, so this process's connections are
    closed first, and each backend's counts are in once it has left ``pg_stat_activity``."""
    reset_engine()
    wait_for(_no_other_backend, what="this database's other backends to end")
    with transaction() as session:
        before = _interaction_blocks(session)
    with transaction() as session:
        driver = session.connection().connection.driver_connection
        threshold, driver.prepare_threshold = driver.prepare_threshold, 0
        try:
            session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
            who = store.principal_ref_by_name(session, HUMAN)
            assert who is not None
            store.answer(session, interaction_id, value="yes", response_id=new_response_id(),
                         response_digest=response_digest("yes"), principal=who)  # fmt: skip
            driver.execute("DEALLOCATE ALL")  # the next transaction on this connection plans afresh
            session.execute(text("SELECT pg_stat_force_next_flush()"))  # reported as the commit returns
        finally:
            driver.prepare_threshold = threshold
    with transaction() as session:
        return _interaction_blocks(session) - before


def test_answer__reads_the_same_few_blocks_with_one_or_many_other_questions_pending(actors_db: str) -> None:
    # Given a table never analyzed (autovacuum kept away, as in the minute after a burst) and one question
    with transaction() as session:
        session.execute(text("ALTER TABLE interactions SET (autovacuum_enabled = false)"))
    _, first = parked("t.ask_one")
    _, second = parked("t.ask_one")
    alone = _blocks_read_by_answer(first["go"].id)
    # When many more questions are waiting, and the other one is answered
    for _ in range(BURST):
        parked("t.ask_one")
    with_many = _blocks_read_by_answer(second["go"].id)
    # Then that answer read no more than the first did, give or take an index page
    assert with_many <= alone + 4, (alone, with_many)
