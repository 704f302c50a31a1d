"""Claim, consume, leases and giving up, straight on the store."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from sqlalchemy import text

from models import store
from models.base import utcnow
from parkway.db import single_statement, transaction
from tasks.holding import Hold, Keeper, renewer
from tasks.sdk import Gone, answer
from tests.integration.helpers import continuation, events, execute_ready, interaction, parked, step
from tests.support import HUMAN, Stack, continuations, event_types, new_response_id, run_row, start, wait_for


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


def _leased(continuation_id: str, execution_id: str, lease_s: float) -> Hold:
    """A lease claimed as the worker claims it, held as the worker holds it."""
    with single_statement() as conn:
        claimed = store.claim_in_one_statement(conn, continuation_id, execution_id=execution_id, lease_s=lease_s,
                                               max_attempts=5)  # fmt: skip
    assert claimed is not None
    return Hold(claimed, execution_id, lease_s)


def test_lease_keeper__renews_a_long_body_s_lease_and_short_bodies_do_not_wake_it(stack: Stack) -> None:
    # A body that outlives its lease keeps it: the renewer extends it every third of the lease (a lease
    # of seconds, so a busy machine's scheduling delays are far inside the two renewals it leaves spare)
    lease_s = 4.0
    cid = _start_continuation(start("t.after"))
    hold = _leased(cid, "exec-a", lease_s)
    first = continuation(cid).lease_expires_at
    assert first is not None
    with Keeper(hold):

        def renewed() -> datetime | None:
            lease = continuation(cid).lease_expires_at
            return lease if lease is not None and lease > first else None

        wait_for(renewed, timeout=20, what="the lease renewed")
        wait_for(lambda: utcnow() > first, timeout=20, what="the first lease to pass")
        assert not _claim(cid, "exec-b", lease_s=lease_s)  # still held: renewed past its first expiry
    # Short executions, one after another, do not wake the thread: once it waits a third of the last lease
    # it saw (here 20 minutes), a hold whose renewal falls due later than that wait ends leaves it asleep
    long = Hold(hold.claim, "exec-a", 3600)
    with Keeper(long):
        pass
    wait_for(lambda: not renewer.held, timeout=5, what="nothing held")
    wait_for(lambda: renewer.sleeps_until - time.monotonic() > 600, timeout=10, what="the thread in its long wait")
    before = renewer.sleeps_until  # each pass of the thread's loop sets it anew
    for i in range(50):
        other = replace(hold.claim, continuation=replace(hold.claim.continuation, id=f"{cid}-{i}"))
        with Keeper(Hold(other, "exec-a", 3600)):
            pass
        time.sleep(0.002)  # the next message's few milliseconds of Celery work: the thread could run in them
    assert renewer.sleeps_until == before
    assert _consume(cid, "exec-a")
