"""Claim, consume, leases and giving up, straight on the store."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from models import store
from models.base import utcnow
from parkway.db import open_transaction, transaction
from tasks.sdk import Gone, answer
from tasks.worker import execute
from tests.integration.helpers import continuation, events, execute_ready, interaction, parked, ready, step
from tests.support import (
    HUMAN,
    WAITING_ON_A_LOCK,
    Stack,
    continuations,
    event_types,
    new_response_id,
    read_now,
    run_row,
    settings_env,
    start,
    wait_for,
)


def _claim(continuation_id: str, execution_id: str, lease_s: float = 30.0) -> bool:
    with transaction() as session:
        return (
            store.claim(session, continuation_id, execution_id=execution_id, lease_s=lease_s, max_attempts=5)
            is not None
        )


def _consume(continuation_id: str, execution_id: str) -> bool:
    with transaction() as session:
        return store.consume(session, continuation_id, execution_id=execution_id) is not None


def _start_continuation(run_id: str) -> str:
    (start_c,) = continuations(run_id)
    assert start_c.status == "ready"
    return start_c.id


def _wait_lease_expired(continuation_id: str) -> None:
    lease = continuation(continuation_id).lease_expires_at
    assert lease is not None
    wait_for(lambda: utcnow() > lease, timeout=5, what="the lease to expire")


def test_claim__two_connections_racing_for_one_continuation_one_wins(stack: Stack) -> None:
    for _ in range(5):
        cid = _start_continuation(start("t.after"))
        barrier = threading.Barrier(2)

        def contend(execution_id: str, cid: str = cid, barrier: threading.Barrier = barrier) -> bool:
            with transaction() as session:
                barrier.wait(timeout=10)
                row = store.claim(session, cid, execution_id=execution_id, lease_s=30, max_attempts=5)
                return row is not None

        with ThreadPoolExecutor(max_workers=2) as pool:
            won = list(pool.map(contend, ["exec-a", "exec-b"]))

        assert sorted(won) == [False, True]
        row = continuation(cid)
        assert row.status == "claimed"
        assert row.attempts == 1
        assert row.claimed_by == ("exec-a" if won[0] else "exec-b")


def test_claim__a_live_lease_keeps_others_out(stack: Stack) -> None:
    cid = _start_continuation(start("t.after"))
    assert _claim(cid, "exec-a")
    assert not _claim(cid, "exec-b")
    assert continuation(cid).claimed_by == "exec-a"


def test_consume__only_the_claiming_execution_may_consume(stack: Stack) -> None:
    cid = _start_continuation(start("t.after"))
    assert _claim(cid, "exec-a")

    assert not _consume(cid, "exec-b")
    assert continuation(cid).status == "claimed"

    assert _consume(cid, "exec-a")
    row = continuation(cid)
    assert row.status == "consumed" and row.consumed_at is not None and row.lease_expires_at is None
    # consumed is final: neither a second consume nor a claim changes it
    assert not _consume(cid, "exec-a")
    assert not _claim(cid, "exec-c")


def test_claim__after_lease_expiry_another_execution_wins_and_the_first_cannot_commit(stack: Stack) -> None:
    # Given execution A holds a claim whose lease runs out (A stalled or died)
    cid = _start_continuation(start("t.after"))
    assert _claim(cid, "exec-a", lease_s=0.01)
    _wait_lease_expired(cid)

    # When B claims it
    assert _claim(cid, "exec-b")

    # Then A can neither renew nor commit; B can
    with transaction() as session:
        assert not store.renew_lease(session, cid, execution_id="exec-a", lease_s=30)
    assert not _consume(cid, "exec-a")
    row = continuation(cid)
    assert (row.status, row.claimed_by, row.attempts) == ("claimed", "exec-b", 2)
    assert _consume(cid, "exec-b")


def test_a_lease_that_ran_out__holds_nothing_even_before_another_execution_claims(stack: Stack) -> None:
    # Given execution A's lease ran out (A stalled), and nothing has touched the row since
    a, b = f"exec-a-{uuid.uuid4().hex}", f"exec-b-{uuid.uuid4().hex}"  # execution ids are unique
    cid = _start_continuation(start("t.after"))
    assert _claim(cid, a, lease_s=0.01)
    _wait_lease_expired(cid)

    # Then A holds no live claim: it is not renewed (an expired lease is not revived), the SDK's fence
    # refuses its writes, and it cannot commit; the row is left for the sweep to release
    with transaction() as session:
        assert not store.holds_live_claim(session, a)
        assert not store.renew_lease(session, cid, execution_id=a, lease_s=30)
    assert not _consume(cid, a)
    assert (continuation(cid).status, continuation(cid).claimed_by) == ("claimed", a)

    # And the execution that claims it next holds it
    assert _claim(cid, b)
    with transaction() as session:
        assert store.holds_live_claim(session, b)


def test_renew_lease__extends_only_the_holders_lease(stack: Stack) -> None:
    cid = _start_continuation(start("t.after"))
    assert _claim(cid, "exec-a", lease_s=1)
    first = continuation(cid).lease_expires_at
    with transaction() as session:
        assert store.renew_lease(session, cid, execution_id="exec-a", lease_s=60)
        assert not store.renew_lease(session, cid, execution_id="exec-b", lease_s=60)
    second = continuation(cid).lease_expires_at
    assert first is not None and second is not None and second > first


def test_give_up__marks_the_continuation_dead_and_interrupts_run_and_step(stack: Stack) -> None:
    # Given a run whose start continuation is claimed by an execution that cannot go on
    run_id = start("t.after")
    cid = _start_continuation(run_id)
    assert _claim(cid, "exec-a")
    step_id = continuation(cid).step_id

    # When it is given up
    with transaction() as session:
        dead = store.give_up(session, cid, reason="out of attempts", execution_id="exec-a")
        assert dead is not None

    # Then the continuation is dead, and run and step are interrupted with the reason
    row = continuation(cid)
    assert (row.status, row.reason, row.lease_expires_at) == ("dead", "out of attempts", None)
    run = run_row(run_id)
    assert (run.status, run.reason, run.finished_by) == ("interrupted", "out of attempts", "exec-a")
    assert run.completed_at is not None
    assert (step(step_id).status, step(step_id).reason) == ("interrupted", "out of attempts")
    logged = events(run_id)
    types = [t for t, _ in logged]
    assert types.count("continuation.dead") == 1
    assert types.count("step.interrupted") == 1
    assert types.count("run.interrupted") == 1
    assert dict(logged)["run.interrupted"]["reason"] == "out of attempts"
    # And a dead continuation cannot be claimed any more
    assert not _claim(cid, "exec-b")


def test_give_up__interrupts_pending_interactions_with_events(stack: Stack) -> None:
    # Given a parked run with pending questions and a live continuation for its step. The pipeline never
    # makes one due while a question is pending, so the test inserts the row itself: this is the shape of
    # work that can no longer make progress (e.g. a version that is not registered).
    run_id, asked = parked("t.ask_two")
    stranded_id = f"stranded-{run_id}"
    with transaction() as session:
        session.execute(
            text(
                "INSERT INTO continuations (id, run_id, step_id, kind, name, status, attempts, publishes, "
                "enqueued_at, created_at) VALUES (:id, :run, :step, 'resume', 'x@1', 'ready', 0, 1, now(), now())"
            ),
            {"id": stranded_id, "run": run_id, "step": asked["window"].step_id},
        )

    with transaction() as session:
        assert store.give_up(session, stranded_id, reason="continuation version x@1 is not registered") is not None

    for key in ("window", "reason"):
        row = interaction(asked[key].id)
        assert row.status == "interrupted"
        assert row.reason == "continuation version x@1 is not registered"
    assert step(asked["window"].step_id).status == "interrupted"
    assert run_row(run_id).status == "interrupted"
    types = event_types(run_id)
    assert types.count("interaction.interrupted") == 2
    assert types.count("run.interrupted") == 1


def test_give_up__on_a_consumed_continuation_returns_none_and_changes_nothing(stack: Stack) -> None:
    run_id = start("t.after")
    consumed = execute_ready(run_id)
    assert run_row(run_id).status == "completed"
    before_run = run_row(run_id)
    before_events = event_types(run_id)

    with transaction() as session:
        assert store.give_up(session, consumed.id, reason="late sweep") is None

    assert continuation(consumed.id).status == "consumed"
    after_run = run_row(run_id)
    assert (after_run.status, after_run.completed_at, after_run.finished_by, after_run.reason) == (
        before_run.status,
        before_run.completed_at,
        before_run.finished_by,
        None,
    )
    assert event_types(run_id) == before_events


def test_interrupt_run__never_overwrites_a_completed_run(stack: Stack) -> None:
    # Given a run completed through its real commit path
    run_id, asked = parked("t.ask_one")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    execute_ready(run_id)
    done = run_row(run_id)
    assert done.status == "completed"
    before_events = event_types(run_id)

    # When something tries to interrupt it (a startup sweep, a late give-up)
    with transaction() as session:
        assert store.interrupt_run(session, run_id, reason="restart", execution_id="sweep") is None

    # Then the proven completion stands, unchanged
    after = run_row(run_id)
    assert (after.status, after.completed_at, after.finished_by, after.result, after.reason) == (
        "completed",
        done.completed_at,
        done.finished_by,
        {"go": "yes"},
        None,
    )
    assert interaction(asked["go"].id).status == "answered"
    assert event_types(run_id) == before_events


def test_interrupt_run__closes_pending_interactions_so_answers_are_gone(stack: Stack) -> None:
    run_id, asked = parked("t.ask_two")
    with transaction() as session:
        assert store.interrupt_run(session, run_id, reason="owner lost authority", execution_id="sweep")

    for key in ("window", "reason"):
        try:
            answer(asked[key].id, "now", response_id=new_response_id(), principal=HUMAN)
        except Gone as exc:
            assert exc.state is not None
            assert (exc.state["status"], exc.state["run_status"]) == ("interrupted", "interrupted")
        else:
            raise AssertionError(f"answering {key} of an interrupted run was accepted")
    assert event_types(run_id).count("interaction.interrupted") == 2


@pytest.fixture
def lease_4s(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """A lease of seconds for executions in this process: a busy machine's scheduling delays stay far inside
    the renewals (every third of it) that it leaves spare."""
    with settings_env(monkeypatch, PARKWAY_CLAIM_LEASE_S="4"):
        yield 4.0


@contextmanager
def _slow_body_running(tmp_path: Path) -> Iterator[tuple[str, Path, Future[str]]]:
    """A run parked on t.slow_done@1 and answered; its continuation executed as a worker executes it, in a
    thread, until its body runs (it says so, then waits for the flag file, which the block's end touches):
    the continuation, the flag and the execution."""
    flag = tmp_path / "go"
    run_id, asked = parked("t.ask_one", {"continuation": "t.slow_done@1", "flag": str(flag)})
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    (due,) = ready(run_id)
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(execute, due.id)
        try:
            wait_for(Path(f"{flag}.running").exists, timeout=30, what="the body running")
            yield due.id, flag, running
        finally:
            flag.touch()


# Whether the database's clock has passed ``at``; and whether a continuation's lease has run out by it.
CLOCK_PASSED = text("SELECT now() > :at")
LEASE_RAN_OUT = text("SELECT lease_expires_at < now() FROM continuations WHERE id = :cid")


def test_lease__renewed_while_a_body_outlives_it__others_stay_out(
    stack: Stack, tmp_path: Path, lease_4s: float
) -> None:
    # Given a continuation whose body runs until a flag file exists, executed as a worker executes it
    with _slow_body_running(tmp_path) as (cid, _, running):
        first = continuation(cid)
        # When the body runs past the end of the lease it was claimed with (the database's clock)
        wait_for(lambda: read_now(CLOCK_PASSED, at=first.lease_expires_at), timeout=30, what="the first lease")
        # Then the lease was renewed: it ends later and is still this execution's; another cannot claim it
        renewed = continuation(cid)
        assert (renewed.status, renewed.claimed_by, renewed.attempts) == ("claimed", first.claimed_by, 1)
        assert renewed.lease_expires_at is not None and first.lease_expires_at is not None
        assert renewed.lease_expires_at > first.lease_expires_at
        assert not _claim(cid, "exec-b")
    # And that execution commits, the only one that ran
    assert running.result(timeout=30) == "committed"
    done = continuation(cid)
    assert (done.status, done.claimed_by, done.attempts) == ("consumed", first.claimed_by, 1)


def test_lease__a_hold_released_without_a_commit_is_not_renewed__it_runs_out(
    stack: Stack, tmp_path: Path, lease_4s: float
) -> None:
    # Given an execution whose body has run and whose commit waits for the continuation's row (held here)
    with _slow_body_running(tmp_path) as (cid, flag, running):
        holder = continuation(cid).claimed_by
        with open_transaction() as conn:
            conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))  # it waits on others here
            conn.execute(text("SELECT 1 FROM continuations WHERE id = :cid FOR UPDATE"), {"cid": cid})
            flag.touch()
            # When the database ends that session (a restart, a failover), so the commit fails, and then the
            # session of the execution's prompt release of its claim too
            for what, like in (("the commit", "%consumed_at%"), ("the release", "UPDATE continuations SET status%")):
                waiting = wait_for(lambda like=like: read_now(WAITING_ON_A_LOCK, like=like), timeout=30, what=what)
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": waiting})
            wait_for(running.done, timeout=30, what="the execution to end")
        assert running.result() == "released"
    # Then nothing was committed, and the hold the execution released is renewed no more: its lease runs out
    # by the database's clock, so another execution (the sweep's re-drive) can claim the continuation
    assert (continuation(cid).status, continuation(cid).claimed_by) == ("claimed", holder)
    wait_for(
        lambda: read_now(LEASE_RAN_OUT, cid=cid), timeout=4 * lease_4s, what="the released hold's lease to run out"
    )
    assert _claim(cid, "exec-b")
