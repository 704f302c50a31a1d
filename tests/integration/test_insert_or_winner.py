"""Insert-or-winner (a run's idempotency key, a tool call's key): a request that waits on a concurrent insert
of the same key gets the winner's row once it commits, whatever its own statement's snapshot showed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select, text

from models import journal, store
from models.status import ToolPhase
from models.tables import Run
from parkway.db import transaction
from tests.support import AGENT, TARGET, wait_for


def _create(session: Any) -> tuple[str, store.Due | None]:
    owner = store.principal_by_name(session, AGENT)
    assert owner is not None
    run, due = store.create_run(session, workflow="t.after", payload={"x": 1}, owner=owner, target=TARGET,
                                idempotency_key="race", request_digest="d")  # fmt: skip
    return run.id, due


def _intent(run_id: str, step_id: str) -> Callable[[Any], tuple[str, bool]]:
    def record(session: Any) -> tuple[str, bool]:
        row, created = journal.record_intent(session, run_id=run_id, journal_step_id=step_id, key="k", name="n",
                                             digest="d", replay="safe", phase=ToolPhase.EXECUTING,
                                             interaction_id=None)  # fmt: skip
        return row.id, created

    return record


def _blocked_on_a_lock() -> bool:
    with transaction() as session:
        waiting = session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    return bool(waiting)


def _race(write: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``write`` in a transaction left open, then in a second one that waits on it; the first commits."""
    second: list[Any] = []
    with transaction() as first_session:
        first = write(first_session)
        thread = threading.Thread(target=lambda: second.append(_in_transaction(write)))
        thread.start()
        wait_for(_blocked_on_a_lock, timeout=10, what="the second insert waiting on the first")
    thread.join(timeout=10)
    assert not thread.is_alive() and second, "the second request did not finish"
    return first, second[0]


def _in_transaction(write: Callable[[Any], Any]) -> Any:
    with transaction() as session:
        return write(session)


def test_create_run__a_concurrent_request_with_the_same_key_gets_the_winners_run(actors_db: str) -> None:
    # When two requests with one idempotency key run at once, the second waiting on the first's insert
    (first_run, first_due), (second_run, second_due) = _race(_create)

    # Then the second answers as a retry of the first: its run, and no continuation of its own
    assert first_due is not None and second_due is None
    assert second_run == first_run
    with transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run).where(Run.idempotency_key == "race")) == 1


def test_record_intent__a_concurrent_execution_gets_the_winners_row(actors_db: str) -> None:
    with transaction() as session:
        run_id, due = _create(session)
        assert due is not None

    # When two executions journal the same tool call at once, the second waiting on the first's insert
    (first, first_created), (second, second_created) = _race(_intent(run_id, due.step_id))

    # Then the second gets the first's row, not created by it
    assert (first_created, second_created) == (True, False)
    assert second == first
