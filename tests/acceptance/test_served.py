"""One meaning of served (SPEC §6, category 3), with real workers of separate modules: a gap in the fleet
waits and only the grace interrupts, and the grace counts only time the fleet was up (issue 41). The grace
passes on the database's clock, the clock the sweep judges it by (``pass_time`` with the fleet down,
``_up_through_the_grace`` with it up), not in real time. The gap test hands its two workers on to the test
past the grace (tests/acceptance/recovery_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

import tests.release_a
import tests.release_b
from parkway.db import transaction
from tasks.sdk import answer
from tests.acceptance.recovery_support import Relay, relay_fixtures, wait_not_live
from tests.support import (
    HUMAN,
    Stack,
    Worker,
    effects,
    event_types,
    interactions,
    new_response_id,
    pass_time,
    read_now,
    run_row,
    run_status,
    settings_env,
    start,
    wait_for,
    wait_parked,
    wait_status,
)

pytestmark = pytest.mark.broker
assert tests.release_a and tests.release_b

GRACE_S = "60"  # long enough for workers and a sweep to start inside it on a loaded host (passed, never waited out)
SINCE_LAST_SEEN = text(
    "SELECT coalesce(extract(epoch FROM now() - max(last_seen_at)), 0) FROM advertised_versions WHERE key = ANY(:keys)"
)
LIVE = text("SELECT count(*) FROM workers WHERE expires_at > now()")
STEP, NEXT = "tests.served_step", "tests.served_next"  # the modules, and the kinds of worker handed on


relay_fixture, own_workers = relay_fixtures({"handed_on": (STEP, NEXT)})


@pytest.fixture
def handed_on(relay: Relay, stack: Stack) -> Callable[[str], Worker]:
    """A worker of a module: the one the previous test handed on, else a new one."""
    return lambda module: relay.take(module, lambda: _worker(stack, module))


@pytest.fixture
def grace(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """This process's sweeps (``wait_for(sweep=True)``) judge by the same grace as the workers."""
    with settings_env(monkeypatch, PARKWAY_VERSION_GRACE_S=GRACE_S):
        yield float(GRACE_S)


def _worker(stack: Stack, module: str) -> Worker:
    return _workers(stack, module)[0]


def _workers(stack: Stack, *modules: str) -> list[Worker]:
    """A worker of each module (one pool process), started together, once each is ready."""
    workers = [
        stack.start_worker(wait=False, concurrency=1, PARKWAY_IMPORTS=m, PARKWAY_VERSION_GRACE_S=GRACE_S)
        for m in modules
    ]
    for worker in workers:
        worker.wait_ready()
    return workers


def _down(worker: Worker) -> None:
    """The worker killed, and no worker live any more (its heartbeat ran out)."""
    worker.kill()
    wait_for(lambda: read_now(LIVE) == 0, timeout=30, what="every worker's heartbeat run out")


def _answer(run_id: str) -> None:
    answer(interactions(run_id)["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)


def _outlast_the_grace(grace: float, *keys: str) -> None:
    """No worker is live, and then the grace passes with the fleet down: nothing has advertised ``keys`` for
    longer than the grace (the database's clock)."""
    wait_for(lambda: read_now(LIVE) == 0, timeout=30, what="every worker's heartbeat run out")
    pass_time(grace + 2)
    assert float(read_now(SINCE_LAST_SEEN, keys=list(keys))) > grace + 1


def _up_through_the_grace(seconds: float) -> None:
    """As though ``seconds`` passed with the fleet up all along: every advertisement and the fleets' returns
    that much older (``pass_time`` would move the live fleet's presence back too: absent, then back now)."""
    back = {"s": seconds}
    with transaction() as session:
        session.execute(text("UPDATE advertised_versions SET last_seen_at = last_seen_at - make_interval(secs => :s)"),
                        back)  # fmt: skip
        session.execute(text("UPDATE fleet_presence SET up_since = up_since - make_interval(secs => :s)"), back)


def test_cold_start__after_an_outage_longer_than_the_grace_the_first_module_up_interrupts_nothing_of_another(
    stack: Stack, grace: float
) -> None:
    # Given workers of modules A and B holding waits: one of B's is answered while the whole fleet is down
    a, b = _workers(stack, "tests.release_a", "tests.release_b")
    of_a, of_b, answered_b = start("a.ask"), start("b.ask"), start("b.ask")
    for run_id in (of_a, of_b, answered_b):
        wait_parked(run_id, sweep=False)
    a.kill()
    b.kill()
    _answer(answered_b)

    # When the outage outlasts the grace, A starts (its startup sweep runs) and an operator sweeps once
    _outlast_the_grace(grace, "a.done@1", "b.done@1")
    _worker(stack, "tests.release_a")
    swept = stack.parkway("sweep", "--once", PARKWAY_VERSION_GRACE_S=GRACE_S)
    assert swept.returncode == 0, swept.stderr

    # Then nothing of B was interrupted
    for run_id in (of_b, answered_b):
        assert run_row(run_id).status in ("waiting", "running"), (run_row(run_id).status, run_row(run_id).reason)
        assert "run.interrupted" not in event_types(run_id)
    assert interactions(of_b)["go"].status == "pending"

    # And once B starts, its answered work completes once, and so does the wait answered now
    _worker(stack, "tests.release_b")
    _answer(of_b)
    for run_id in (answered_b, of_b):
        assert wait_status(run_id, "completed").result == {"go": "yes"}
        assert effects(run_id, "b.done") == 1


def test_a_gap__a_next_and_a_start_to_a_step_whose_only_worker_is_down_wait_for_it(
    stack: Stack, relay: Relay, grace: float
) -> None:
    # Given the worker of served.second ran once and is down, and a worker of the module that hands on to it
    _down(_worker(stack, STEP))
    handing_on = _worker(stack, NEXT)

    # When a run's step hands on to served.second (Next), and a run of served.second is started
    handed_on, started = start("served.first", {"n": 1}), start("served.second", {"n": 2})

    # Then both wait (never failed), and run once its worker starts
    wait_for(lambda: "step.completed" in event_types(handed_on), timeout=30, what="served.first to hand on")
    assert {run_row(handed_on).status, run_row(started).status} == {"running"}
    step_worker = _worker(stack, STEP)
    assert wait_status(handed_on, "completed").result == {"n": 1}
    assert wait_status(started, "completed").result == {"n": 2}
    assert effects(handed_on, "served.second") == effects(started, "served.second") == 1
    relay.hand_on(STEP, step_worker)
    relay.hand_on(NEXT, handing_on)


def test_a_gap_past_the_grace__a_next_to_a_step_no_live_worker_runs_is_interrupted_never_failed(
    handed_on: Callable[[str], Worker], grace: float
) -> None:
    # Given the worker of served.second ran once and is down, and a live worker of the module that hands on to it
    step_worker, _ = handed_on(STEP), handed_on(NEXT)
    step_worker.kill()
    wait_not_live("served.second")

    # When a run's step hands on to served.second and the grace passes with the fleet up
    run_id = start("served.first", {"n": 1})
    wait_for(lambda: "step.completed" in event_types(run_id), timeout=30, what="served.first to hand on")
    _up_through_the_grace(grace + 2)

    # Then the run is interrupted with the reason, never failed
    wait_for(lambda: run_status(run_id) in ("interrupted", "failed"), timeout=30, sweep=True, what="its end")
    run = run_row(run_id)
    assert (run.status, run.error) == ("interrupted", None)
    assert (run.reason or "").startswith("step served.second: no live worker has advertised it since"), run.reason
    assert "run.failed" not in event_types(run_id)
    assert effects(run_id) == 0
