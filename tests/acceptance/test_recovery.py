"""Recovery with real processes: broker loss, warm shutdown, code changed while parked, crash loops,
and the schema guard.

A test that ends with a plain worker still running hands it on to the next one that begins by needing one
(tests/acceptance/recovery_support.py): their order below is what lets most of them start one worker less.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import bindparam, select, text

from beat.report import SweepReport
from beat.sweep import MAX_CHAINED_PASSES, continuations_queued, should_chain
from models.base import utcnow
from models.tables import Continuation
from parkway.db import open_transaction, transaction
from parkway.migrate import head_revision
from parkway.settings import get_settings
from tasks.publish import publish
from tasks.sdk import answer
from tests.acceptance.recovery_support import Handed, Relay, relay_fixtures
from tests.proxy import through_proxy
from tests.support import (
    BACKEND_STATE,
    HUMAN,
    WAITING_ON_A_LOCK,
    Stack,
    Worker,
    continuations,
    effects,
    event_types,
    interactions,
    new_response_id,
    read_now,
    run_row,
    run_status,
    settings_env,
    start,
    sweeps_done,
    wait_for,
    wait_parked,
    wait_status,
)

RENEWAL = "UPDATE continuations SET lease_expires_at%"
PLAIN, PROXIED = "plain", "proxied"  # the kinds of worker handed on: as ``plain`` and ``proxied`` start them


def plain(stack: Stack) -> Worker:
    """A worker with the suite's settings and one pool process."""
    return stack.start_worker(concurrency=1)


relay_fixture, own_workers = relay_fixtures({"plain_worker": (PLAIN,), "proxied": (PROXIED,)})


@pytest.fixture
def plain_worker(relay: Relay, stack: Stack) -> Worker:
    """A plain worker: the one the previous test handed on, else a new one."""
    return relay.take(PLAIN, lambda: plain(stack))


@pytest.fixture
def proxied(relay: Relay, stack: Stack) -> Iterator[Handed]:
    """A worker of one pool process that reaches the database through a proxy, which is up: the one the
    previous test handed on, else a new one; stopped after the test, its proxy cut."""
    handed = relay.take_handed(PROXIED)
    if handed is None:
        proxy, through = through_proxy(stack.database_url)
        proxy.start()
        handed = Handed(stack.start_worker(concurrency=1, PARKWAY_DATABASE_URL=through), proxy)
    try:
        yield handed
    finally:
        handed.drop()


@pytest.mark.broker
def test_sweep_chaining__a_full_pass_chains_only_while_the_queue_holds_no_more_than_it_sent(stack: Stack) -> None:
    # Given no worker, an empty continuations queue and a pass that stopped at its bound after sending 2
    stack.flush_broker()
    report = SweepReport(batch=2, published=2)
    report.counts["republished"] = 2
    assert continuations_queued() == 0
    assert should_chain(report, chained=0)
    # And never past the cap, nor for a pass that did not fill any category
    assert not should_chain(report, chained=MAX_CHAINED_PASSES)
    partial = SweepReport(batch=2, published=1)
    partial.counts["republished"] = 1
    assert not should_chain(partial, chained=0)
    # When the queue holds a backlog larger than what the pass sent
    assert publish([(f"backlog-{i}", "resume") for i in range(5)]) == 5
    wait_for(lambda: continuations_queued() == 5, what="5 messages queued")
    # Then the next pass waits for the beat: re-sending rows that sit in a backlog only adds duplicates
    assert not should_chain(report, chained=0)
    # Unless those messages are what the chain's earlier passes sent
    assert should_chain(report, chained=2, sent_before=3)
    stack.flush_broker()


def test_continuation_version_removed_while_parked__fails_closed(stack: Stack, relay: Relay) -> None:
    # Given a step parked on t.one_done@2 by code that has it
    old = stack.start_worker(concurrency=1, PARKWAY_TEST_WITH_V2="1")
    run_id = start("t.ask_one", {"continuation": "t.one_done@2"})
    asked = wait_parked(run_id)
    assert old.terminate() == 0
    # When it is answered, then a deploy without that version takes the continuation (it hands it back: no
    # live worker runs it, and the sweep publishes it again until the grace has passed)
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    deployed = plain(stack)
    # Then, once no live worker has advertised the version for the grace, step and run are interrupted with a
    # reason naming it, and nothing ran
    run = wait_status(run_id, "interrupted")
    assert (run.reason or "").startswith("continuation version t.one_done@2: no live worker has advertised it since")
    assert effects(run_id) == 0
    resume = [c for c in continuations(run_id) if c.kind == "resume"]
    assert [c.status for c in resume] == ["dead"]
    assert "run.interrupted" in event_types(run_id)
    relay.hand_on(PLAIN, deployed)


@pytest.mark.broker
def test_sigterm_while_runs_wait__records_no_cancellation(stack: Stack, relay: Relay, plain_worker: Worker) -> None:
    worker = plain_worker
    run_ids = [start("t.ask_one") for _ in range(3)]
    asked = {run_id: wait_parked(run_id)["go"].id for run_id in run_ids}
    # When the worker is stopped with SIGTERM
    assert worker.terminate() == 0
    # Then nothing was canceled or interrupted: the runs still wait, their questions still pending
    for run_id in run_ids:
        assert run_status(run_id) == "waiting"
        assert interactions(run_id)["go"].status == "pending"
        assert not {"run.canceled", "run.interrupted", "interaction.canceled"} & set(event_types(run_id))
    # And answered afterwards, a new worker completes them
    for interaction_id in asked.values():
        answer(interaction_id, "later", response_id=new_response_id(), principal=HUMAN)
    new = plain(stack)
    for run_id in run_ids:
        assert wait_status(run_id, "completed").result == {"go": "later"}
    relay.hand_on(PLAIN, new)


@pytest.mark.broker
def test_worker_stopped_in_a_lease_renewal__holds_no_row_lock_and_its_run_is_re_driven(
    stack: Stack, relay: Relay, plain_worker: Worker, tmp_path: Path
) -> None:
    # Given a run whose body is running (waiting for a flag) on a worker that renews its lease
    hung = plain_worker
    run_id = start("t.review", {"wait_for": str(tmp_path / "go")})
    wait_for(lambda: [c for c in continuations(run_id) if c.status == "claimed"], timeout=60, what="the claim")
    (claimed,) = [c for c in continuations(run_id) if c.status == "claimed"]

    # When its next renewal waits on the continuation's row lock, and the worker is stopped right there
    with open_transaction() as conn:
        conn.execute(select(Continuation.id).where(Continuation.id == claimed.id).with_for_update())
        backend = wait_for(lambda: read_now(WAITING_ON_A_LOCK, like=RENEWAL), timeout=20, what="the renewal waiting")
        os.killpg(hung.proc.pid, signal.SIGSTOP)
    try:
        # Then the renewal commits without the stopped worker: its backend holds no transaction open
        def settled() -> str | None:
            state = read_now(BACKEND_STATE, pid=backend)
            return state if state != "active" else None

        assert wait_for(settled, timeout=20, what="the renewal's statement done") == "idle"

        # And once its lease ran out, the sweep re-drives the run on another worker, which completes it
        other = plain(stack)
        run = wait_status(run_id, "completed", timeout=60, sweep=True)
    finally:
        hung.kill()
    assert run.finished_by not in (None, claimed.claimed_by)
    (start_continuation,) = [c for c in continuations(run_id) if c.kind == "start"]
    assert start_continuation.attempts == 2
    relay.hand_on(PLAIN, other)


@pytest.mark.broker
def test_broker_flushed__twenty_answered_runs_complete_exactly_once(
    stack: Stack, relay: Relay, plain_worker: Worker
) -> None:
    # Given 20 parked runs, then the worker stopped and every run answered
    worker = plain_worker
    run_ids = [start("t.ask_one") for _ in range(20)]
    asked = {run_id: wait_parked(run_id)["go"].id for run_id in run_ids}
    assert worker.terminate() == 0
    for interaction_id in asked.values():
        answer(interaction_id, "go", response_id=new_response_id(), principal=HUMAN)
    # When the broker loses every message
    stack.flush_broker()
    # Then a new worker and the beat-driven sweep (no help from this process) complete all 20 once
    new = plain(stack)
    stack.start_beat()
    for run_id in run_ids:
        wait_status(run_id, "completed", timeout=180, sweep=False)  # the filesystem broker polls, on a busy CI
    assert [effects(run_id, "one_done") for run_id in run_ids] == [1] * 20
    relay.hand_on(PLAIN, new)


def test_completed_run_keeps_its_terminal_record_across_restart_and_sweeps(
    stack: Stack, relay: Relay, plain_worker: Worker
) -> None:
    # Given a run that completed on a worker, which is then killed
    worker = plain_worker
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    done = wait_status(run_id, "completed")
    history = event_types(run_id)
    worker.kill()
    passes = sweeps_done()
    # When a worker starts again and its startup sweep has passed, and then an operator's sweep passes
    again_up = plain(stack)
    wait_for(lambda: sweeps_done() > passes, timeout=30, what="the restarted worker's startup sweep")
    result = stack.parkway("sweep", "--once")
    assert result.returncode == 0 and "sweep pass:" in result.stdout
    # Then the run's terminal record, its answer and its event log are as the completion left them
    again = run_row(run_id)
    assert (again.status, again.completed_at, again.finished_by, again.reason) == (
        "completed",
        done.completed_at,
        done.finished_by,
        None,
    )
    assert interactions(run_id)["go"].status == "answered"
    assert event_types(run_id) == history
    relay.hand_on(PLAIN, again_up)


@pytest.mark.broker
def test_broker_flushed__one_sweep_task_chains_passes_until_every_run_completes(
    stack: Stack, plain_worker: Worker
) -> None:
    # Given 10 answered runs whose messages the broker lost, all already due for a re-send
    worker = plain_worker
    run_ids = [start("t.ask_one") for _ in range(10)]
    asked = {run_id: wait_parked(run_id)["go"].id for run_id in run_ids}
    assert worker.terminate() == 0
    for interaction_id in asked.values():
        answer(interaction_id, "go", response_id=new_response_id(), principal=HUMAN)
    stack.flush_broker()
    wait_for(lambda: _all_older_than_reenqueue_delay(run_ids), what="the ready rows to be due for a re-send")
    # When a worker sweeping 2 rows per category a pass starts, and with it its one startup sweep task (no
    # beat runs: without chaining, that pass would re-send only 2 of them; a second task sent now would race
    # it, and two chains each seeing the other's messages queued both stop, rightly, until the beat)
    stack.start_worker(concurrency=1, PARKWAY_SWEEP_BATCH="2", PARKWAY_SWEEP_INTERVAL_S="3600")
    # Then its passes chain until all 10 complete, each once
    for run_id in run_ids:
        wait_status(run_id, "completed", timeout=180, sweep=False)  # the filesystem broker polls, on a busy CI
    assert [effects(run_id, "one_done") for run_id in run_ids] == [1] * 10


def _all_older_than_reenqueue_delay(run_ids: list[str]) -> bool:
    with transaction() as session:
        return not session.execute(
            text(
                "SELECT 1 FROM continuations WHERE run_id IN :ids AND status = 'ready' AND kind = 'resume' "
                "AND enqueued_at > :cutoff"
            ).bindparams(bindparam("ids", expanding=True)),
            {"ids": run_ids, "cutoff": utcnow() - timedelta(seconds=get_settings().reenqueue_after_s)},
        ).first()


@pytest.mark.broker
def test_crash_loop__continuation_dead_after_max_attempts(
    stack: Stack, plain_worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker that always dies before committing, with two attempts allowed
    parker = plain_worker
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    parker.kill()
    # (each execution is counted by its claim, whether the sweep re-drives it once its lease ran out or the
    # broker's redelivery does)
    slow_resend = {"PARKWAY_MAX_ATTEMPTS": "2", "PARKWAY_REENQUEUE_AFTER_S": "60"}
    crashing = stack.start_worker(concurrency=1, PARKWAY_CRASH_AT="resume.before_commit", **slow_resend)
    # When the continuation becomes due
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    # Then after two executions it is given up: dead, run interrupted with the reason, no effect (this
    # process sweeps, with the worker's settings, where a beat would have the worker sweep)
    with settings_env(monkeypatch, **slow_resend):
        run = wait_status(run_id, "interrupted", timeout=60, sweep=True)
    assert run.reason is not None and "gave up after 2 attempts" in run.reason
    assert crashing.text().count("crash point resume.before_commit reached") == 2
    resume = [c for c in continuations(run_id) if c.kind == "resume"]
    assert [(c.status, c.attempts) for c in resume] == [("dead", 2)]
    assert effects(run_id) == 0


@pytest.mark.parametrize(
    ("revision", "message"),
    [("ffffffffffff", "newer than this code knows"), (None, "run `parkway migrate`")],
)
def test_schema_guard__worker_refuses_a_schema_it_does_not_match(
    stack: Stack, revision: str | None, message: str
) -> None:
    with transaction() as session:
        current = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        if revision is None:
            session.execute(text("DELETE FROM alembic_version"))
        else:
            session.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    try:
        worker = stack.start_worker(wait=False)
        code = worker.proc.wait(timeout=40)
        assert code != 0
        assert "refusing to start" in worker.text() and message in worker.text()
        refused = stack.parkway("sweep", "--once")
        assert refused.returncode != 0 and message in refused.stderr
    finally:
        with transaction() as session:
            session.execute(text("DELETE FROM alembic_version"))
            session.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": current})


@pytest.mark.parametrize("process", ["beat", "worker"])  # the worker last: the next test takes it
def test_started_while_the_database_cannot_be_reached__waits_for_it_then_runs(
    stack: Stack, relay: Relay, process: str
) -> None:
    # Given the database unreachable (a proxy in front of it that refuses connections, as in a restart)
    proxy, through = through_proxy(stack.database_url)
    if process == "worker":
        started = stack.start_worker(wait=False, concurrency=1, PARKWAY_DATABASE_URL=through)
    else:
        started = stack.start_beat(wait=False, PARKWAY_DATABASE_URL=through)
    try:
        # When the process starts, then it says it waits (and does not exit)
        wait_for(lambda: "the database cannot be reached yet; waiting" in started.text(), timeout=40,
                 what=f"the {process} waiting for the database")  # fmt: skip
        assert started.alive(), started.text()[-2000:]
        # And once the database can be reached, it runs
        proxy.start()
        ready = "ready." if process == "worker" else "Sending due task"
        wait_for(lambda: ready in started.text() or not started.alive(), timeout=40, what=f"the {process} running")
        assert started.alive() and "refusing to start" not in started.text(), started.text()[-2000:]
    except BaseException:
        started.kill()
        proxy.cut()
        raise
    if process == "worker":  # a worker that reaches the database through a proxy that is up
        relay.hand_on(PROXIED, started, proxy)
    else:
        started.kill()
        proxy.cut()


@pytest.mark.broker
def test_database_down_when_a_continuation_is_delivered__one_line_and_the_sweep_drives_it_later(
    proxied: Handed,
) -> None:
    # Given a worker that reaches the database through a proxy, which is then cut (as in a restart)
    worker, proxy = proxied.worker, proxied.proxy
    assert proxy is not None
    proxy.cut()
    # When a continuation is delivered to it
    run_id = start("t.after")
    # Then it says in one line that the database is unavailable and leaves it to the sweep: no traceback
    wait_for(lambda: "continuation left to the sweep" in worker.text(), timeout=40, what="the worker's line")
    assert "raised unexpected" not in worker.text() and "Traceback" not in worker.text(), worker.text()[-3000:]
    # And once the database is back, the sweep's publish drives the run to completion
    proxy.restore()
    wait_status(run_id, "completed", timeout=60, sweep=True)


def test_parkway_migrate__is_idempotent_at_head(stack: Stack) -> None:
    result = stack.parkway("migrate")
    assert result.returncode == 0, result.stderr
    assert f"-> {head_revision()}" in result.stdout  # progress lines go to stdout
