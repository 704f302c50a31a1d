"""The recovery sweep: re-enqueue, lease expiry, give-up, expiry, stranded reviews; bounded and safe beside
itself. Each test finds the database as a clone of its own would be, because a pass looks at whole tables: the
module's one database, put back after each test (``swept_db``, tests/integration/conftest.py). The waits
that fail closed (category 3) are in test_sweep_fail_closed.py."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from beat.sweep import queued, run_sweep
from models import store
from models.base import utcnow
from models.tables import Continuation
from parkway.db import transaction
from parkway.settings import get_settings
from tasks.celery_app import RESUME_STEP, RUN_STEP, STEPS_QUEUE, app
from tasks.sdk import Gone, answer
from tasks.worker import execute
from tests.integration.helpers import (
    Sent,
    continuation,
    events,
    execute_ready,
    interaction,
    parked,
    purge_queues,
    step,
)
from tests.integration.sweep_support import (
    claim_for,
    claim_until_expired,
    many_ids,
    pass_counts,
    start_ids,
)
from tests.support import (
    HUMAN,
    continuations,
    event_types,
    new_response_id,
    pass_time,
    run_row,
    start,
    wait_for,
)

# --------------------------------------------------------------------------- category 1: ready, not enqueued


def test_sweep__republishes_a_ready_continuation_older_than_the_reenqueue_delay(
    swept_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given a committed start continuation whose publish was lost
    (cid,) = start_ids(1)
    sent.clear()

    # When a sweep runs before the re-enqueue delay passed, it leaves it alone
    assert pass_counts(run_sweep())["republished"] == 0
    assert sent.calls == [] and continuation(cid).publishes == 1

    # When a sweep runs after the delay (of the database's clock)
    pass_time(get_settings().reenqueue_after_s + 1)
    aged = continuation(cid).enqueued_at
    report = run_sweep()

    # Then it is published again once, stamped as enqueued now
    assert pass_counts(report) == {"republished": 1, "lease_expired": 0, "expired": 0, "dead": 0, "errors": 0}
    assert sent.calls == [(RUN_STEP, cid, "parkway.steps")]
    row = continuation(cid)
    assert (row.status, row.publishes, row.attempts) == ("ready", 2, 0)
    assert aged is not None and row.enqueued_at is not None and row.enqueued_at > aged

    # And it is the same unit of work: executing it commits the run once
    assert execute(cid) == "committed"
    assert execute(cid) == "duplicate"
    assert run_row(row.run_id).status == "completed"


def test_sweep__a_backlog_older_than_the_delay_is_not_sent_again_only_what_the_broker_lost(
    swept_db: str, sent: Sent
) -> None:
    # Given three started runs whose messages really wait in the steps queue (nothing consumes here), stale
    ids = start_ids(3)
    for cid in ids:
        type(app).send_task(app, RUN_STEP, args=[cid], queue=STEPS_QUEUE)
    assert queued(STEPS_QUEUE) == 3
    pass_time(get_settings().reenqueue_after_s + 1)
    sent.clear()

    # When a sweep runs, none is sent again: the queue holds a message for each (a backlog, not a loss)
    assert pass_counts(run_sweep())["republished"] == 0
    assert sent.calls == [] and [continuation(c).publishes for c in ids] == [1, 1, 1]

    # When the broker loses them and one comes back: two sent again (the oldest), what the queue cannot hold
    purge_queues()
    type(app).send_task(app, RUN_STEP, args=[ids[2]], queue=STEPS_QUEUE)
    assert pass_counts(run_sweep())["republished"] == 2
    assert sent.ids() == ids[:2]

    # And after a flush, all of the stale ones, though a fresh run's message waits in the queue (it is that
    # run's: a steady trickle of fresh messages never keeps a lost one from being sent again)
    purge_queues()
    pass_time(get_settings().reenqueue_after_s + 1)
    (fresh,) = start_ids(1)
    type(app).send_task(app, RUN_STEP, args=[fresh], queue=STEPS_QUEUE)
    sent.clear()
    assert pass_counts(run_sweep())["republished"] == 3
    assert sorted(sent.ids()) == sorted(ids)


def test_sweep__republishes_a_resume_continuation_to_the_continuations_queue(swept_db: str, sent: Sent) -> None:
    run_id, asked = parked("t.ask_one")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    sent.clear()

    pass_time(60)
    run_sweep()

    assert sent.calls == [(RESUME_STEP, resume.id, "parkway.continuations")]


def test_sweep__each_category_touches_at_most_batch_rows_per_pass(
    swept_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given 30 stale ready continuations, 30 claims with expired leases and 30 questions past expiry
    stale = many_ids(30)
    claimed = many_ids(30)
    for cid in claimed:
        claim_for(cid, lease_s=0.01)
    expiring = [parked("t.ask_two", {"expires_in": 1})[1]["window"].id for _ in range(30)]
    pass_time(slow_reenqueue + 1)

    # When sweeps with batch=10 run at a time when all of them are due
    reports = [pass_counts(run_sweep(batch=10)) for _ in range(4)]

    # Then every pass handled at most 10 per category, and three passes handled all of them
    per_pass = {"republished": 10, "lease_expired": 10, "expired": 10, "dead": 0, "errors": 0}
    assert reports[:3] == [per_pass] * 3
    assert reports[3] == dict.fromkeys(per_pass, 0)
    assert {continuation(c).publishes for c in stale} == {2}
    assert {(continuation(c).status, continuation(c).attempts) for c in claimed} == {("ready", 1)}
    assert {interaction(i).status for i in expiring} == {"expired"}


def test_sweep__two_concurrent_sweeps_republish_each_row_exactly_once(
    swept_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given 200 ready continuations whose publish was lost
    ids = many_ids(200)
    sent.clear()
    pass_time(slow_reenqueue + 1)
    barrier = threading.Barrier(2)

    def sweeper() -> int:
        barrier.wait(timeout=30)
        total = 0
        while True:
            n = run_sweep(batch=25).counts["republished"]
            total += n
            if n == 0:
                return total

    # When two sweeps run concurrently over them
    with ThreadPoolExecutor(max_workers=2) as pool:
        totals = list(pool.map(lambda _: sweeper(), range(2)))

    # Then every row was republished by exactly one of them, exactly once
    assert sum(totals) == 200
    assert Counter(sent.ids()) == Counter(dict.fromkeys(ids, 1))
    with transaction() as session:
        publishes = Counter(session.scalars(select(Continuation.publishes)).all())
    assert publishes == {2: 200}


# --------------------------------------------------------------------------- category 1: expired leases


def test_sweep__expired_claim_is_released_to_ready_and_republished(swept_db: str, sent: Sent) -> None:
    # Given an execution that claimed a continuation and died (its lease ran out)
    (cid,) = start_ids(1)
    claim_until_expired(cid)
    sent.clear()

    # When the sweep runs
    report = run_sweep()

    # Then the claim is released, sent again, and the next execution commits it (attempt 2)
    assert pass_counts(report)["lease_expired"] == 1
    row = continuation(cid)
    assert (row.status, row.claimed_by, row.lease_expires_at, row.attempts, row.publishes) == (
        "ready",
        None,
        None,
        1,
        2,
    )
    assert sent.ids() == [cid]
    assert execute(cid) == "committed"
    assert continuation(cid).attempts == 2
    assert run_row(row.run_id).status == "completed"


def test_sweep__an_expired_claim_that_cannot_be_released_is_skipped_and_the_others_are_released(
    swept_db: str, sent: Sent
) -> None:
    # Given three executions that died, one of whose rows the release cannot write (its publish count is at
    # the integer limit, so the batch's one statement fails)
    ids = start_ids(3)
    for cid in ids:
        claim_until_expired(cid)
    with transaction() as session:
        session.execute(update(Continuation).where(Continuation.id == ids[0]).values(publishes=2**31 - 1))
    sent.clear()

    # When the sweep runs
    report = run_sweep()

    # Then the bad row is counted as an error and left as it was; the other two are released and sent
    assert (pass_counts(report)["lease_expired"], pass_counts(report)["errors"]) == (2, 1)
    assert [continuation(cid).status for cid in ids] == ["claimed", "ready", "ready"]
    assert sorted(sent.ids()) == sorted(ids[1:])


def test_sweep__live_claim_is_left_alone(swept_db: str, sent: Sent) -> None:
    (cid,) = start_ids(1)
    claim_for(cid, lease_s=30, execution_id="alive")
    sent.clear()

    pass_time(5)
    report = run_sweep()

    assert pass_counts(report)["lease_expired"] == 0
    assert (continuation(cid).status, continuation(cid).claimed_by) == ("claimed", "alive")
    assert sent.calls == []


def test_sweep__expired_claim_out_of_attempts_becomes_dead_and_interrupts_its_run(swept_db: str, sent: Sent) -> None:
    max_attempts = get_settings().max_attempts
    run_id = start("t.after")
    (cid,) = [c.id for c in continuations(run_id)]

    # Given executions that each claimed and died, one short of the limit: the sweep still re-drives it
    for _ in range(max_attempts - 1):
        claim_until_expired(cid)
    assert pass_counts(run_sweep())["lease_expired"] == 1
    assert continuation(cid).status == "ready"

    # When the last allowed execution dies as well
    claim_until_expired(cid)
    assert continuation(cid).attempts == max_attempts
    sent.clear()
    report = run_sweep()

    # Then the continuation is dead and its run and step are interrupted, with the reason
    assert pass_counts(report)["dead"] == 1 and pass_counts(report)["lease_expired"] == 0
    row = continuation(cid)
    assert row.status == "dead" and row.reason is not None and "attempts" in row.reason
    run = run_row(run_id)
    assert run.status == "interrupted" and run.reason is not None and "attempts" in run.reason
    assert run.completed_at is not None
    assert step(row.step_id).status == "interrupted"
    types = event_types(run_id)
    assert types.count("continuation.dead") == 1 and types.count("run.interrupted") == 1
    assert sent.calls == []

    # And a later pass, or a late delivery, does nothing more
    pass_time(60)
    assert pass_counts(run_sweep()) == dict.fromkeys(pass_counts(report), 0)
    assert execute(cid) == "duplicate"


# --------------------------------------------------------------------------- category 2: expiry


def test_sweep__its_session_gone_mid_category__ends_the_pass_with_one_error_not_one_per_row(
    swept_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given five questions past their expiry, and the sweep's session ended by the server at the first
    # (as PostgreSQL ends one idle in a transaction for too long: its process was stopped mid-pass)
    for _ in range(5):
        parked("t.ask_two", {"expires_in": 1})
    pass_time(5)
    real_expire_due = store.expire_due

    def expire_due(session, interaction_id):  # type: ignore[no-untyped-def]
        session.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        return real_expire_due(session, interaction_id)

    monkeypatch.setattr(store, "expire_due", expire_due)
    # When the sweep passes, then it ends with the database's error, skipping no row as "bad"
    with pytest.raises(DBAPIError):
        run_sweep()
    assert "sweep skipped a bad row" not in caplog.text
    # And the next pass, on a session that works, expires every one
    monkeypatch.setattr(store, "expire_due", real_expire_due)
    assert pass_counts(run_sweep())["expired"] == 5


def test_sweep__expired_question_closes_and_the_continuation_waits_for_its_sibling(swept_db: str, sent: Sent) -> None:
    # Given a run parked on "window" (expires in 1 s) and "reason" (no expiry)
    run_id, asked = parked("t.ask_two", {"expires_in": 1})
    window, reason = asked["window"], asked["reason"]
    assert window.expires_at is not None and reason.expires_at is None

    # When a sweep runs before the expiry, nothing happens
    assert pass_counts(run_sweep())["expired"] == 0
    assert interaction(window.id).status == "pending"

    # When a sweep runs past the expiry
    pass_time(5)
    report = run_sweep()

    # Then "window" is expired, "reason" still pending, and no continuation is due yet
    assert pass_counts(report)["expired"] == 1
    assert interaction(window.id).status == "expired"
    assert interaction(reason.id).status == "pending"
    assert [c.kind for c in continuations(run_id)] == ["start"]
    assert run_row(run_id).status == "waiting"
    assert [d["interaction_id"] for t, d in events(run_id) if t == "interaction.expired"] == [window.id]

    # And a late answer to it is 410 with status expired
    with pytest.raises(Gone) as caught:
        answer(window.id, "now", response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None and caught.value.state["status"] == "expired"
    assert interaction(window.id).value is None

    # When the sibling is answered, exactly one continuation becomes due and sees the expiry
    sent.clear()
    answer(reason.id, "maintenance", response_id=new_response_id(), principal=HUMAN)
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    assert sent.ids() == [resume.id]
    execute_ready(run_id)
    result = run_row(run_id).result
    assert result["window"] is None and result["window_status"] == "expired"
    assert result["reason"] == "maintenance"

    # And expired stays closed: another pass changes nothing
    pass_time(10)
    assert pass_counts(run_sweep())["expired"] == 0
    assert interaction(window.id).status == "expired"


def test_sweep__expiry_of_the_last_pending_question_makes_the_continuation_due(swept_db: str, sent: Sent) -> None:
    run_id, asked = parked("t.ask_two", {"expires_in": 1})
    answer(asked["reason"].id, "why not", response_id=new_response_id(), principal=HUMAN)
    assert [c.kind for c in continuations(run_id)] == ["start"]
    sent.clear()

    # When the expiry passes for real and a sweep runs
    expires_at = asked["window"].expires_at
    assert expires_at is not None
    wait_for(lambda: utcnow() > expires_at, timeout=5, what="the expiry to pass")
    assert pass_counts(run_sweep())["expired"] == 1

    # Then the step's continuation is due and sent once
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    assert resume.status == "ready"
    assert sent.ids() == [resume.id]
    assert run_row(run_id).status == "running"


def test_sweep__expiry_racing_an_answer_on_the_same_question_never_errors(
    swept_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock order: the answer locks the step, then writes the interaction; the expiry pass must not hold the
    interaction while it waits for the step, or the two deadlock and one of them fails with a database error.
    """
    from models import answers

    # Given a question the sweep considers past its expiry while someone is answering it
    _, asked = parked("t.ask_two", {"expires_in": 60})
    window = asked["window"]
    sweep_selected, answer_locked = threading.Event(), threading.Event()
    real_expire_due, real_validate = store.expire_due, answers.validate_value

    def expire_due(session, interaction_id):  # type: ignore[no-untyped-def]
        # the sweep has selected the row; let the answer take the step before expiring it
        sweep_selected.set()
        answer_locked.wait(timeout=2)
        return real_expire_due(session, interaction_id)

    def validate(interaction, value):  # type: ignore[no-untyped-def]
        # the answer holds the step (validation runs under the lock, before the write)
        answer_locked.set()
        return real_validate(interaction, value)

    monkeypatch.setattr(store, "expire_due", expire_due)
    monkeypatch.setattr(answers, "validate_value", validate)

    def answering() -> object:
        assert sweep_selected.wait(timeout=10)
        try:
            return answer(window.id, "now", response_id=new_response_id(), principal=HUMAN)
        except Exception as exc:
            return exc

    # When the sweep's expiry and the answer interleave
    pass_time(120)
    with ThreadPoolExecutor(max_workers=2) as pool:
        sweeping = pool.submit(run_sweep)
        answered = pool.submit(answering)
        report, outcome = sweeping.result(timeout=60), answered.result(timeout=60)

    # Then one of them wins cleanly: a receipt or a 410, never a database error on either side
    assert isinstance(outcome, dict | Gone), f"the answer failed with {type(outcome).__name__}: {outcome}"
    assert report.counts["errors"] == 0
    final = interaction(window.id).status
    assert final == ("answered" if isinstance(outcome, dict) else "expired")


# --------------------------------------------------------------------------- category 4: stranded reviews


def test_sweep__a_stranded_review_is_interrupted_with_its_owners_lease_in_the_reason(swept_db: str, sent: Sent) -> None:
    # Given a review whose owning execution died holding its claim (the lease ran out), and one whose
    # owner left no claim at all
    (cid,) = start_ids(1)
    claim_for(cid, lease_s=0.01, execution_id="dead-exec")
    row = continuation(cid)
    with transaction() as session:
        for kind, owner in (("a", "dead-exec"), ("b", "no-claim")):
            store.start_review(session, run_id=row.run_id, step_id=row.step_id, kind=kind, execution_id=owner)
    lease = row.lease_expires_at
    assert lease is not None
    wait_for(lambda: utcnow() > lease, timeout=5, what="the lease to expire")

    # When the sweep's category 4 runs before any release of the claim (a pass releases expired claims first)
    with transaction() as session:
        assert len(store.interrupt_stranded_reviews(session, batch=10)) == 2

    # Then both are interrupted; the reason says what became of each owner, the lease as Python prints it
    reasons = [(reason, data["reason"]) for reason, data in events(row.run_id) if reason == "review.interrupted"]
    counts = "0 findings and 0 verifications were recorded"
    assert [text for _, text in reasons] == [
        f"owner execution dead-exec is gone (its lease on continuation {cid} expired at {lease}); {counts}",
        f"owner execution no-claim is gone (its claim was released after its lease expired); {counts}",
    ]
