"""The recovery sweep's category 3: waits that can no longer make progress fail closed (a version no live worker
serves past its grace, an owner that lost its grant), bounded and safe beside itself. The database as in
test_sweep.py: the module's one, put back after each test (``swept_db``, tests/integration/conftest.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from beat.sweep import run_sweep
from models import store
from models.tables import Grant, Step
from parkway.db import transaction
from parkway.settings import reset_settings
from tasks.sdk import Gone, answer
from tasks.worker import execute
from tests.integration.helpers import (
    Sent,
    add_principal,
    advertise,
    execute_ready,
    interaction,
    live_grant_ids,
    parked,
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
)

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
    swept_db: str, sent: Sent, grace: float
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


def test_sweep__within_the_grace_a_wait_nobody_serves_stays_pending(swept_db: str, grace: float) -> None:
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


def test_sweep__with_no_live_worker_at_all_nothing_is_interrupted(swept_db: str, grace: float) -> None:
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
    swept_db: str, grace: float
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
    swept_db: str, grace: float, monkeypatch: pytest.MonkeyPatch
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


def test_sweep__a_wait_whose_owner_lost_its_grant_is_interrupted(swept_db: str, sent: Sent) -> None:
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


def test_sweep__a_revocation_stays_queued_while_its_owner_has_a_run_still_running(swept_db: str) -> None:
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


def test_sweep__a_revocation_whose_owner_is_granted_again_interrupts_nothing(swept_db: str) -> None:
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


def test_sweep__revoked_waits_are_ended_a_batch_a_pass(swept_db: str) -> None:
    # Given 7 waits of bot, whose grant is then revoked
    runs = [parked("t.ask_one")[0] for _ in range(7)]
    [grant] = _revoke_all(AGENT)
    # When passes of batch 3 run
    counts = [run_sweep(batch=3).counts["revoked"] for _ in range(4)]
    # Then each pass ended at most 3, all were ended once, and the revocation is swept after the last
    assert counts == [3, 3, 1, 0]
    assert {run_row(r).status for r in runs} == {"interrupted"}
    assert _swept(grant)


def test_sweep__failing_closed_is_bounded_by_batch_and_safe_beside_itself(swept_db: str, grace: float) -> None:
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
    swept_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
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
