"""Commit races on the path production takes: two executions that each believe they hold one continuation
commit ``Complete``, ``Next`` or ``Park`` at the same moment, through the worker's ``_run`` (a body's
outcome with no ``in_commit`` callback: autocommit statements for ``Complete`` and ``Next``)."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import text

from models import store
from parkway.db import open_transaction, single_statement
from tasks.worker import Prepared, _claim, _run
from tests.integration.helpers import Sent, continuation, ready
from tests.support import (
    WAITING_ON_A_LOCK,
    Stack,
    continuations,
    event_types,
    interactions,
    read_now,
    run_status,
    start,
    wait_for,
)

# What each outcome commits: an event of its own (once, as every event of one commit), the run's status.
COMMITS = {
    "Complete": ("run.completed", "completed"),
    "Next": ("continuation.ready", "running"),
    "Park": ("step.parked", "waiting"),
}
LOST = "claim lost before commit"
CONSUME = "%consumed_at%"  # the consume's statement (a lease renewal's does not name it)


def _held(continuation_id: str) -> Prepared:
    """The continuation claimed as the worker claims it, by a new execution."""
    execution_id = store.new_id()
    prepared = _claim(continuation_id, execution_id, {"continuation_id": continuation_id})
    assert isinstance(prepared, Prepared), prepared
    return prepared


def _two_holders(continuation_id: str) -> tuple[Prepared, Prepared]:
    """Execution A's claim, whose lease then ran out (A stalled), and execution B's, which claimed it next:
    each believes it holds the continuation."""
    stale = _held(continuation_id)
    with single_statement() as conn:
        conn.execute(text("UPDATE continuations SET lease_expires_at = now() - interval '1 second' WHERE id = :cid"),
                     {"cid": continuation_id})  # fmt: skip
    return stale, _held(continuation_id)


def _waiting() -> int:
    """How many consume statements wait for a row lock now."""
    return len(read_now(text(f"SELECT array_agg(pid) FROM ({WAITING_ON_A_LOCK.text}) w"), like=CONSUME) or [])


def _race(first: Prepared, second: Prepared) -> tuple[str, str]:
    """Both executions' ``_run`` sent to their commit while a transaction holds the continuation's row,
    ``first`` before ``second``: each commit's statement then waits for the row (or, finding the row is not
    its own, returns at once), and the row is let go once both are in. What each ``_run`` returned.
    A set order, not a barrier's: with one, which commit queues first is chance, and a consume that let the
    stale execution win would fail only the runs where it came first."""
    cid = first.hold.claim.continuation.id
    with ThreadPoolExecutor(max_workers=2) as pool, open_transaction() as conn:
        conn.execute(text("SELECT 1 FROM continuations WHERE id = :cid FOR UPDATE"), {"cid": cid})
        runs: list[Future[str]] = []
        for prepared in (first, second):
            before = _waiting()
            run = pool.submit(_run, prepared, {"execution_id": prepared.hold.execution_id})
            runs.append(run)
            wait_for(lambda run=run, before=before: run.done() or _waiting() > before, timeout=20,
                     what="the commit waiting for the row, or returned")  # fmt: skip
        conn.commit()
        return runs[0].result(timeout=30), runs[1].result(timeout=30)


@pytest.mark.parametrize("queued_first", ["stale", "live"])
@pytest.mark.parametrize("outcome", list(COMMITS))
def test_commit_race__exactly_one_execution_commits_and_the_other_logs_the_lost_race(
    stack: Stack, sent: Sent, caplog: pytest.LogCaptureFixture, outcome: str, queued_first: str
) -> None:
    # Given two executions of one continuation that each believe they hold it: A's lease ran out, B claimed
    run_id = start("t.outcome", {"outcome": outcome})
    (due,) = ready(run_id)
    stale, live = _two_holders(due.id)
    before = event_types(run_id)
    sent.clear()
    caplog.set_level(logging.INFO, logger="parkway.executor")

    # When both commit the body's outcome at the same moment (``queued_first`` reaching the row first)
    first, second = (stale, live) if queued_first == "stale" else (live, stale)
    results = dict(zip((first.hold.execution_id, second.hold.execution_id), _race(first, second), strict=True))

    # Then the execution holding the live claim commits, and the other returns having lost
    assert results == {live.hold.execution_id: "committed", stale.hold.execution_id: "lost"}
    row = continuation(due.id)
    assert (row.status, row.claimed_by, row.attempts) == ("consumed", live.hold.execution_id, 2)
    # And what the outcome writes was written once
    event, status = COMMITS[outcome]
    written = event_types(run_id)[len(before) :]
    assert event in written and len(written) == len(set(written)), written
    assert run_status(run_id) == status
    assert len(continuations(run_id)) == (2 if outcome == "Next" else 1)
    assert len(interactions(run_id)) == (1 if outcome == "Park" else 0)
    assert len(sent.calls) == (1 if outcome == "Next" else 0)  # the new step's continuation, published once
    # And the loser said so, in one line naming its execution
    lost = [r for r in caplog.records if r.getMessage().startswith(LOST)]
    assert [getattr(r, "execution_id", None) for r in lost] == [stale.hold.execution_id]
