"""The recovery sweep: re-enqueue, lease expiry, give-up, expiry; bounded and
safe beside itself. Each test finds the database as a clone of its own would be, because a pass looks at whole
tables: the module's one database, put back after each test (``actors_db``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from beat.report import SweepReport
from beat.sweep import queued, run_sweep
from models import store
from models.base import utcnow
from models.tables import Continuation, Grant, Step
from parkway.db import transaction
from parkway.settings import get_settings, reset_settings
from tasks.celery_app import RESUME_STEP, RUN_STEP, STEPS_QUEUE, app
from tasks.projection import drain_projections
from tasks.sdk import Gone, answer
from tasks.worker import execute
from tests.acceptance.seeding import keep_rows, put_back_rows, shape, started_runs
from tests.conftest import database_of_its_own
from tests.integration.helpers import (
    Sent,
    add_principal,
    advertise,
    continuation,
    events,
    execute_ready,
    interaction,
    live_grant_ids,
    make_actors,
    parked,
    purge_queues,
    step,
)
from tests.support import (
    AGENT,
    HUMAN,
    TARGET,
    continuations,
    event_types,
    new_response_id,
    pass_time,
    run_row,
    start,
    wait_for,
)


@pytest.fixture(scope="module")
def module_db(template_db: str) -> Iterator[str]:
    """A clone of the template with the actors (what each test had a clone of its own of), its rows kept for
    ``actors_db`` to put back: one database and one engine for the module, not a database made and dropped for
    each test (a drop forces a checkpoint) and an engine whose statements are compiled anew."""
    with database_of_its_own(template_db) as url:
        make_actors()
        keep_rows()
        yield url


@pytest.fixture
def actors_db(module_db: str) -> Iterator[str]:
    """The module's database as a clone of its own would be (bot, ana, eve and boss as in ``stack``), and this
    process's settings read afresh (as ``use_database`` does); put back as it was after the test."""
    reset_settings()
    yield module_db
    drain_projections()  # a run this test ended is projected on a thread a moment later: not after the put-back
    put_back_rows()


def _start_ids(n: int, workflow: str = "t.after") -> list[str]:
    """Start ``n`` runs and return their ready start continuations."""
    ids = []
    for i in range(n):
        (c,) = continuations(start(workflow, {"i": i}))
        ids.append(c.id)
    return ids


def _many_ids(n: int, workflow: str = "t.after") -> list[str]:
    """``_start_ids`` for the tests of many rows whose order does not matter: the first run started, the others
    made as it was by the store's own statement at once (the start is not what these tests are about)."""
    started = start(workflow)
    seeded = started_runs(n - 1, workflow)
    assert shape(seeded[0][0]) == shape(started)
    (first,) = continuations(started)
    return [first.id, *(cid for _, cid in seeded)]


def _claim(continuation_id: str, lease_s: float, execution_id: str | None = None) -> None:
    with transaction() as session:
        row = store.claim(
            session,
            continuation_id,
            execution_id=execution_id or store.new_id(),
            lease_s=lease_s,
            max_attempts=100,
        )
        assert row is not None


def _claim_until_expired(continuation_id: str) -> None:
    """One execution claims and dies: its short lease runs out for real."""
    _claim(continuation_id, 0.01)
    lease = continuation(continuation_id).lease_expires_at
    assert lease is not None
    wait_for(lambda: utcnow() > lease, timeout=5, what="the lease to expire")


@pytest.fixture
def slow_reenqueue(monkeypatch: pytest.MonkeyPatch) -> float:
    """A re-enqueue delay longer than a test's passes take (the suite's 1 s would let a row republished by
    the first pass fall due again by the last): returns it. ``pass_time`` past it makes rows stale."""
    monkeypatch.setenv("PARKWAY_REENQUEUE_AFTER_S", "60")
    reset_settings()
    return 60.0


def _counts(report: SweepReport) -> dict[str, int]:
    return {k: report.counts[k] for k in ("republished", "lease_expired", "expired", "dead", "errors")}


# --------------------------------------------------------------------------- category 1: ready, not enqueued


def test_sweep__republishes_a_ready_continuation_older_than_the_reenqueue_delay(
    actors_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given a committed start continuation whose publish was lost
    (cid,) = _start_ids(1)
    sent.clear()

    # When a sweep runs before the re-enqueue delay passed, it leaves it alone
    assert _counts(run_sweep())["republished"] == 0
    assert sent.calls == [] and continuation(cid).publishes == 1

    # When a sweep runs after the delay (of the database's clock)
    pass_time(get_settings().reenqueue_after_s + 1)
    aged = continuation(cid).enqueued_at
    report = run_sweep()

    # Then it is published again once, stamped as enqueued now
    assert _counts(report) == {"republished": 1, "lease_expired": 0, "expired": 0, "dead": 0, "errors": 0}
    assert sent.calls == [(RUN_STEP, cid, "parkway.steps")]
    row = continuation(cid)
    assert (row.status, row.publishes, row.attempts) == ("ready", 2, 0)
    assert aged is not None and row.enqueued_at is not None and row.enqueued_at > aged

    # And it is the same unit of work: executing it commits the run once
    assert execute(cid) == "committed"
    assert execute(cid) == "duplicate"
    assert run_row(row.run_id).status == "completed"


def test_sweep__a_backlog_older_than_the_delay_is_not_sent_again_only_what_the_broker_lost(
    actors_db: str, sent: Sent
) -> None:
    # Given three started runs whose messages really wait in the steps queue (nothing consumes here), stale
    ids = _start_ids(3)
    for cid in ids:
        type(app).send_task(app, RUN_STEP, args=[cid], queue=STEPS_QUEUE)
    assert queued(STEPS_QUEUE) == 3
    pass_time(get_settings().reenqueue_after_s + 1)
    sent.clear()

    # When a sweep runs, none is sent again: the queue holds a message for each (a backlog, not a loss)
    assert _counts(run_sweep())["republished"] == 0
    assert sent.calls == [] and [continuation(c).publishes for c in ids] == [1, 1, 1]

    # When the broker loses them and one comes back: two sent again (the oldest), what the queue cannot hold
    purge_queues()
    type(app).send_task(app, RUN_STEP, args=[ids[2]], queue=STEPS_QUEUE)
    assert _counts(run_sweep())["republished"] == 2
    assert sent.ids() == ids[:2]

    # And after a flush, all of the stale ones, though a fresh run's message waits in the queue (it is that
    # run's: a steady trickle of fresh messages never keeps a lost one from being sent again)
    purge_queues()
    pass_time(get_settings().reenqueue_after_s + 1)
    (fresh,) = _start_ids(1)
    type(app).send_task(app, RUN_STEP, args=[fresh], queue=STEPS_QUEUE)
    sent.clear()
    assert _counts(run_sweep())["republished"] == 3
    assert sorted(sent.ids()) == sorted(ids)


def test_sweep__republishes_a_resume_continuation_to_the_continuations_queue(actors_db: str, sent: Sent) -> None:
    run_id, asked = parked("t.ask_one")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    sent.clear()

    pass_time(60)
    run_sweep()

    assert sent.calls == [(RESUME_STEP, resume.id, "parkway.continuations")]


def test_sweep__each_category_touches_at_most_batch_rows_per_pass(
    actors_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given 30 stale ready continuations, 30 claims with expired leases and 30 questions past expiry
    stale = _many_ids(30)
    claimed = _many_ids(30)
    for cid in claimed:
        _claim(cid, lease_s=0.01)
    expiring = [parked("t.ask_two", {"expires_in": 1})[1]["window"].id for _ in range(30)]
    pass_time(slow_reenqueue + 1)

    # When sweeps with batch=10 run at a time when all of them are due
    reports = [_counts(run_sweep(batch=10)) for _ in range(4)]

    # Then every pass handled at most 10 per category, and three passes handled all of them
    per_pass = {"republished": 10, "lease_expired": 10, "expired": 10, "dead": 0, "errors": 0}
    assert reports[:3] == [per_pass] * 3
    assert reports[3] == dict.fromkeys(per_pass, 0)
    assert {continuation(c).publishes for c in stale} == {2}
    assert {(continuation(c).status, continuation(c).attempts) for c in claimed} == {("ready", 1)}
    assert {interaction(i).status for i in expiring} == {"expired"}


def test_sweep__two_concurrent_sweeps_republish_each_row_exactly_once(
    actors_db: str, sent: Sent, slow_reenqueue: float
) -> None:
    # Given 200 ready continuations whose publish was lost
    ids = _many_ids(200)
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


def test_sweep__expired_claim_is_released_to_ready_and_republished(actors_db: str, sent: Sent) -> None:
    # Given an execution that claimed a continuation and died (its lease ran out)
    (cid,) = _start_ids(1)
    _claim_until_expired(cid)
    sent.clear()

    # When the sweep runs
    report = run_sweep()

    # Then the claim is released, sent again, and the next execution commits it (attempt 2)
    assert _counts(report)["lease_expired"] == 1
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
    actors_db: str, sent: Sent
) -> None:
    # Given three executions that died, one of whose rows the release cannot write (its publish count is at
    # the integer limit, so the batch's one statement fails)
    ids = _start_ids(3)
    for cid in ids:
        _claim_until_expired(cid)
    with transaction() as session:
        session.execute(update(Continuation).where(Continuation.id == ids[0]).values(publishes=2**31 - 1))
    sent.clear()

    # When the sweep runs
    report = run_sweep()

    # Then the bad row is counted as an error and left as it was; the other two are released and sent
    assert (_counts(report)["lease_expired"], _counts(report)["errors"]) == (2, 1)
    assert [continuation(cid).status for cid in ids] == ["claimed", "ready", "ready"]
    assert sorted(sent.ids()) == sorted(ids[1:])


def test_sweep__live_claim_is_left_alone(actors_db: str, sent: Sent) -> None:
    (cid,) = _start_ids(1)
    _claim(cid, lease_s=30, execution_id="alive")
    sent.clear()

    pass_time(5)
    report = run_sweep()

    assert _counts(report)["lease_expired"] == 0
    assert (continuation(cid).status, continuation(cid).claimed_by) == ("claimed", "alive")
    assert sent.calls == []


def test_sweep__expired_claim_out_of_attempts_becomes_dead_and_interrupts_its_run(actors_db: str, sent: Sent) -> None:
    max_attempts = get_settings().max_attempts
    run_id = start("t.after")
    (cid,) = [c.id for c in continuations(run_id)]

    # Given executions that each claimed and died, one short of the limit: the sweep still re-drives it
    for _ in range(max_attempts - 1):
        _claim_until_expired(cid)
    assert _counts(run_sweep())["lease_expired"] == 1
    assert continuation(cid).status == "ready"

    # When the last allowed execution dies as well
    _claim_until_expired(cid)
    assert continuation(cid).attempts == max_attempts
    sent.clear()
    report = run_sweep()

    # Then the continuation is dead and its run and step are interrupted, with the reason
    assert _counts(report)["dead"] == 1 and _counts(report)["lease_expired"] == 0
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
    assert _counts(run_sweep()) == dict.fromkeys(_counts(report), 0)
    assert execute(cid) == "duplicate"


# --------------------------------------------------------------------------- category 3: waits that fail closed


GRACE_S = 600.0  # the default PARKWAY_VERSION_GRACE_S, which these tests run with
EVERYTHING = ("t.one_done@1", "t.finish@1")  # what the tests' "new" worker runs, unless told otherwise


@pytest.fixture
def grace(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setenv("PARKWAY_VERSION_GRACE_S", str(GRACE_S))
    reset_settings()
    yield GRACE_S
    monkeypatch.undo()
    reset_settings()


def _unserved(key: str) -> str:
    """The reason a wait on ``key`` is interrupted with (its last advertisement's time elided)."""
    return f"continuation version {key}: no live worker has advertised it since "


def _assert_interrupted(run_id: str, go: str, reason: str) -> None:
    """Interrupted with a reason that starts with ``reason``."""
    run = run_row(run_id)
    assert run.status == "interrupted" and (run.reason or "").startswith(reason) and run.completed_at is not None
    assert interaction(go).status == "interrupted" and interaction(go).reason == run.reason
    assert {s.status for s in _steps(run_id)} == {"interrupted"}
    types = event_types(run_id)
    assert types.count("run.interrupted") == 1 and types.count("interaction.interrupted") == 1
    # And an answer now is refused with the run's status: never a 200 that a worker would throw away
    with pytest.raises(Gone) as caught:
        answer(go, "yes", response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None
    assert (caught.value.state["status"], caught.value.state["run_status"]) == ("interrupted", "interrupted")


def _steps(run_id: str) -> list[Step]:
    with transaction() as session:
        return list(session.scalars(select(Step).where(Step.run_id == run_id)))


def test_sweep__a_wait_on_a_version_no_live_worker_advertised_for_the_grace_is_interrupted(
    actors_db: str, sent: Sent, grace: float
) -> None:
    # Given a run parked on t.one_done@1 and another on t.finish@1, both served by an old worker
    old = advertise("old@host", continuations=EVERYTHING)
    run_id, asked = parked("t.ask_one")
    other, other_asked = parked("t.ask_two")

    # When the old worker stops, a new one runs only t.finish@1 (the fleet stays up), and the grace passes
    advertise("new@host", continuations=("t.finish@1",), ttl_s=3 * grace)
    with transaction() as session:
        assert store.withdraw(session, old)
    pass_time(grace + 1)
    sent.clear()
    report = run_sweep()

    # Then the wait on t.one_done@1 is interrupted with a reason naming the version and since when; the other
    # wait, which a live worker serves, is left alone
    _assert_interrupted(run_id, asked["go"].id, _unserved("t.one_done@1"))
    assert report.counts["unregistered"] == 1 and report.counts["errors"] == 0
    assert run_row(other).status == "waiting"
    assert {i.status for i in other_asked.values()} == {"pending"}
    assert sent.calls == []

    # And a later pass does nothing more
    assert run_sweep().counts["unregistered"] == 0


def test_sweep__within_the_grace_a_wait_nobody_serves_stays_pending(actors_db: str, grace: float) -> None:
    # Given a wait whose only worker stopped, and a new worker that does not run its version
    old = advertise("old@host", continuations=EVERYTHING)
    run_id, asked = parked("t.ask_one")
    with transaction() as session:
        assert store.withdraw(session, old)
    advertise("new@host", continuations=("t.finish@1",))

    # When sweeps run before the grace has passed
    pass_time(grace - 30)
    advertise("new@host-2", continuations=("t.finish@1",))
    report = run_sweep()

    # Then the wait is still pending: a rolling deploy may bring a worker that runs it
    assert report.counts["unregistered"] == 0
    assert run_row(run_id).status == "waiting" and interaction(asked["go"].id).status == "pending"


def test_sweep__with_no_live_worker_at_all_nothing_is_interrupted(actors_db: str, grace: float) -> None:
    # Given a wait whose version was last advertised long ago, and no worker alive at all
    advertise("old@host", continuations=EVERYTHING, ttl_s=5)
    run_id, asked = parked("t.ask_one")
    pass_time(grace * 10)

    # When a sweep runs (an operator's shell, say)
    report = run_sweep()

    # Then nothing is interrupted: the work waits for a worker
    assert report.counts["unregistered"] == 0
    assert run_row(run_id).status == "waiting" and interaction(asked["go"].id).status == "pending"


def test_sweep__a_version_never_advertised_fails_closed_a_grace_after_its_wait_parked(
    actors_db: str, grace: float
) -> None:
    # Given a live worker that does not run t.nowhere@1, and a wait parked on it (by a worker that thought
    # someone would), and a second such wait parked later
    advertise("new@host", continuations=EVERYTHING, ttl_s=3 * grace)
    early, early_asked = parked("t.ask_one", {"continuation": "t.nowhere@1"})
    pass_time(grace + 1)
    late, _ = parked("t.ask_one", {"continuation": "t.nowhere@1"})

    # When a sweep runs
    report = run_sweep()

    # Then only the wait parked more than a grace ago is interrupted, and the reason says nobody ever ran it
    _assert_interrupted(early, early_asked["go"].id, "continuation version t.nowhere@1: no live worker has ever")
    assert report.counts["unregistered"] == 1
    assert run_row(late).status == "waiting"


def test_sweep__the_sweeping_process_s_own_registry_decides_nothing(
    actors_db: str, grace: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import registry

    # Given a wait on t.one_done@1, which a live worker runs
    serving = advertise("worker@host", continuations=EVERYTHING)
    served, _ = parked("t.ask_one")
    # When a sweep runs in a process that has no workflow registered at all (an operator's shell)
    monkeypatch.setattr(registry, "_continuations", {})
    monkeypatch.setattr(registry, "_steps", {})
    # Then the wait stays pending
    assert run_sweep().counts["unregistered"] == 0
    assert run_row(served).status == "waiting"

    # And, the other way round, a process that has t.one_done@1 does not keep alive a wait no worker serves
    monkeypatch.undo()
    advertise("other@host", continuations=("t.finish@1",), ttl_s=3 * grace)  # the fleet stays up
    with transaction() as session:
        assert store.withdraw(session, serving)
    pass_time(grace + 1)
    assert registry.has_continuation("t.one_done@1")
    assert run_sweep().counts["unregistered"] == 1
    assert run_row(served).status == "interrupted"


def test_sweep__a_wait_whose_owner_lost_its_grant_is_interrupted(actors_db: str, sent: Sent) -> None:
    # Given a run parked for bot, and another of a second agent that keeps its grant
    run_id, asked = parked("t.ask_one")
    add_principal("bot2", "agent", grant=TARGET)
    from tasks.sdk import start_run

    kept = start_run("t.ask_one", {}, principal="bot2", target=TARGET)
    execute_ready(kept)

    # When bot's grant on the run's target is revoked and a sweep runs
    with transaction() as session:
        for grant_id in live_grant_ids(AGENT):
            assert store.revoke_grant(session, grant_id) is not None
    report = run_sweep()

    # Then bot's wait is interrupted, reason "authority revoked"; bot2's is left alone
    _assert_interrupted(run_id, asked["go"].id, "authority revoked")
    assert report.counts["revoked"] == 1 and report.counts["errors"] == 0
    assert run_row(kept).status == "waiting"
    assert run_sweep().counts["revoked"] == 0


def _swept(grant_id: str) -> bool:
    with transaction() as session:
        return session.get_one(Grant, grant_id).swept_at is not None


def _revoke_all(name: str) -> list[str]:
    grants = live_grant_ids(name)
    with transaction() as session:
        for grant_id in grants:
            assert store.revoke_grant(session, grant_id) is not None
    return grants


def test_sweep__a_revocation_stays_queued_while_its_owner_has_a_run_still_running(actors_db: str) -> None:
    # Given a run of bot whose step has not run yet (its body might park after the revocation)
    run_id = start("t.ask_one")
    # When bot's grant is revoked and a sweep runs
    [grant] = _revoke_all(AGENT)
    assert run_sweep().counts["revoked"] == 0
    # Then the revocation stays queued: the run has not ended
    assert not _swept(grant)
    # And once the run ends (its continuation refuses to run without the authority), the next pass marks it
    (due,) = continuations(run_id)
    assert execute(due.id) == "dead"
    assert run_row(run_id).status == "interrupted" and run_row(run_id).reason == "authority revoked"
    run_sweep()
    assert _swept(grant)


def test_sweep__a_revocation_whose_owner_is_granted_again_interrupts_nothing(actors_db: str) -> None:
    # Given a wait of bot, whose grant is revoked and then granted again
    run_id, asked = parked("t.ask_one")
    [grant] = _revoke_all(AGENT)
    with transaction() as session:
        principal = store.principal_by_name(session, AGENT)
        assert principal is not None
        store.create_grant(session, principal_id=principal.id, target=TARGET)
    # When a sweep runs
    assert run_sweep().counts["revoked"] == 0
    # Then the wait is still pending, and the revocation is swept
    assert run_row(run_id).status == "waiting" and interaction(asked["go"].id).status == "pending"
    assert _swept(grant)


def test_sweep__revoked_waits_are_ended_a_batch_a_pass(actors_db: str) -> None:
    # Given 7 waits of bot, whose grant is then revoked
    runs = [parked("t.ask_one")[0] for _ in range(7)]
    [grant] = _revoke_all(AGENT)
    # When passes of batch 3 run
    counts = [run_sweep(batch=3).counts["revoked"] for _ in range(4)]
    # Then each pass ended at most 3, all were ended once, and the revocation is swept after the last
    assert counts == [3, 3, 1, 0]
    assert {run_row(r).status for r in runs} == {"interrupted"}
    assert _swept(grant)


def test_sweep__failing_closed_is_bounded_by_batch_and_safe_beside_itself(actors_db: str, grace: float) -> None:
    # Given 12 waits on a version whose last worker stopped more than a grace ago, and a live worker without it
    runs = [parked("t.ask_one")[0] for _ in range(12)]
    advertise("old@host", continuations=EVERYTHING, ttl_s=5)
    advertise("new@host", continuations=("t.finish@1",), ttl_s=3 * grace)  # the fleet up all the while
    pass_time(grace + 1)

    # When a pass with batch=5 runs, then two passes run concurrently until none finds anything
    assert run_sweep(batch=5).counts["unregistered"] == 5
    barrier = threading.Barrier(2)

    def sweeper() -> int:
        barrier.wait(timeout=30)
        total = 0
        while (n := run_sweep(batch=2).counts["unregistered"]) > 0:
            total += n
        return total

    with ThreadPoolExecutor(max_workers=2) as pool:
        totals = list(pool.map(lambda _: sweeper(), range(2)))

    # Then each wait was interrupted exactly once
    assert sum(totals) == 7
    assert {run_row(r).status for r in runs} == {"interrupted"}
    assert [event_types(r).count("run.interrupted") for r in runs] == [1] * 12


def test_sweep__the_database_failing_under_a_batch_release__ends_the_pass_without_a_row_by_row_retry(
    actors_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the database ending the batch release's session (as a restart does)
    real = store.release_expired_claims

    def release_expired_claims(conn, **kwargs):  # type: ignore[no-untyped-def]
        conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        return real(conn, **kwargs)

    monkeypatch.setattr(store, "release_expired_claims", release_expired_claims)
    # When the sweep passes, then it ends with that error, not a second one from trying each row
    with pytest.raises(DBAPIError):
        run_sweep()
    assert "trying each row" not in caplog.text and "sweep skipped a bad row" not in caplog.text


# --------------------------------------------------------------------------- category 2: expiry


def test_sweep__its_session_gone_mid_category__ends_the_pass_with_one_error_not_one_per_row(
    actors_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
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
    assert _counts(run_sweep())["expired"] == 5


def test_sweep__expired_question_closes_and_the_continuation_waits_for_its_sibling(actors_db: str, sent: Sent) -> None:
    # Given a run parked on "window" (expires in 1 s) and "reason" (no expiry)
    run_id, asked = parked("t.ask_two", {"expires_in": 1})
    window, reason = asked["window"], asked["reason"]
    assert window.expires_at is not None and reason.expires_at is None

    # When a sweep runs before the expiry, nothing happens
    assert _counts(run_sweep())["expired"] == 0
    assert interaction(window.id).status == "pending"

    # When a sweep runs past the expiry
    pass_time(5)
    report = run_sweep()

    # Then "window" is expired, "reason" still pending, and no continuation is due yet
    assert _counts(report)["expired"] == 1
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
    assert _counts(run_sweep())["expired"] == 0
    assert interaction(window.id).status == "expired"


def test_sweep__expiry_of_the_last_pending_question_makes_the_continuation_due(actors_db: str, sent: Sent) -> None:
    run_id, asked = parked("t.ask_two", {"expires_in": 1})
    answer(asked["reason"].id, "why not", response_id=new_response_id(), principal=HUMAN)
    assert [c.kind for c in continuations(run_id)] == ["start"]
    sent.clear()

    # When the expiry passes for real and a sweep runs
    expires_at = asked["window"].expires_at
    assert expires_at is not None
    wait_for(lambda: utcnow() > expires_at, timeout=5, what="the expiry to pass")
    assert _counts(run_sweep())["expired"] == 1

    # Then the step's continuation is due and sent once
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    assert resume.status == "ready"
    assert sent.ids() == [resume.id]
    assert run_row(run_id).status == "running"


def test_sweep__expiry_racing_an_answer_on_the_same_question_never_errors(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
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


def test_sweep__a_stranded_review_is_interrupted_with_its_owners_lease_in_the_reason(
    actors_db: str, sent: Sent
) -> None:
    # Given a review whose owning execution died holding its claim (the lease ran out), and one whose
    # owner left no claim at all
    (cid,) = _start_ids(1)
    _claim(cid, lease_s=0.01, execution_id="dead-exec")
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
