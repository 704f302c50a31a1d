"""A first delivery held by its row lock (tasks.holding): nothing is committed until its outcome is, a
crash leaves no trace, the re-drive completes the run once, and a long body turns the lock into a lease."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from models.tables import Continuation
from tasks.sdk import answer
from tests.support import (
    HUMAN,
    Stack,
    Worker,
    continuations,
    effects,
    event_types,
    new_response_id,
    run_status,
    start,
    wait_for,
    wait_parked,
    wait_status,
)

pytestmark = pytest.mark.usefixtures("own_workers")


def _answered_slow_body(stack: Stack, flag: Path, **worker_env: str) -> tuple[str, Worker]:
    """A run parked by a clean worker (killed idle), then answered while ``worker_env``'s worker runs: its
    continuation body has started and waits for ``flag``."""
    clean = stack.start_worker()
    run_id = start("t.ask_one", {"continuation": "t.slow_done@1", "flag": str(flag)})
    asked = wait_parked(run_id)
    clean.kill()
    worker = stack.start_worker(**worker_env)
    answer(asked["go"].id, "ship", response_id=new_response_id(), principal=HUMAN)
    wait_for(lambda: Path(f"{flag}.running").exists(), timeout=30, what="the continuation body to start")
    return run_id, worker


def _resume(run_id: str) -> Continuation:
    (resume,) = [c for c in continuations(run_id) if c.kind == "resume"]
    return resume


def _pool_children(worker: Worker) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(worker.proc.pid)], capture_output=True, text=True, check=False)
    return [int(pid) for pid in out.stdout.split()]


def test_first_delivery_killed_mid_body__nothing_committed_and_the_run_completes_once(
    stack: Stack, tmp_path: Path
) -> None:
    # Given a continuation body running under its row lock (it stays locked for the whole test)
    flag = tmp_path / "go"
    run_id, worker = _answered_slow_body(stack, flag, PARKWAY_LOCKED_BODY_S="120")
    # Then nothing of the execution is committed while the body runs: no claim, no attempt, no resumption
    resume = _resume(run_id)
    assert (resume.status, resume.attempts, resume.claimed_by) == ("ready", 0, None)
    assert "step.resumed" not in event_types(run_id)
    # When the whole worker is SIGKILLed during the body
    worker.kill()
    assert (_resume(run_id).status, _resume(run_id).attempts) == ("ready", 0)  # rolled back: no trace
    flag.touch()
    # Then a new worker, with the sweep, completes the run exactly once, on the lease path
    stack.start_worker()
    run = wait_status(run_id, "completed", timeout=60)
    assert run.result == {"go": "ship", "attempt": 1}
    assert effects(run_id, "slow_done") == 1
    resume = _resume(run_id)
    assert (resume.status, resume.attempts) == ("consumed", 1)
    assert resume.publishes >= 2  # sent again by the sweep: the lost execution's message went with the worker
    assert event_types(run_id).count("run.completed") == 1
    assert event_types(run_id).count("step.resumed") == 1


def test_first_delivery_whose_pool_child_is_killed__redelivered_counted_and_completed_once(
    stack: Stack, tmp_path: Path
) -> None:
    # Given a continuation body running under its row lock in a pool child
    flag = tmp_path / "go"
    run_id, worker = _answered_slow_body(stack, flag, PARKWAY_LOCKED_BODY_S="120")
    assert _resume(run_id).status == "ready"
    # When that child is SIGKILLed (the main process rejects the message: the broker redelivers it)
    for child in _pool_children(worker):
        os.kill(child, signal.SIGKILL)
    # Then the redelivery counts the lost execution as an attempt and completes the run exactly once (no
    # sweep: its re-send, run first, would leave the lost execution uncounted: docs/operations.md)
    run = wait_status(run_id, "completed", timeout=60, sweep=False)
    assert run.result == {"go": "ship", "attempt": 2}
    assert effects(run_id, "slow_done") == 1
    assert (_resume(run_id).status, _resume(run_id).attempts) == ("consumed", 2)
    assert event_types(run_id).count("run.completed") == 1


def test_long_first_delivery__its_lock_becomes_a_lease_while_the_body_runs(stack: Stack, tmp_path: Path) -> None:
    # Given a continuation body that runs longer than PARKWAY_LOCKED_BODY_S
    flag = tmp_path / "go"
    run_id, _ = _answered_slow_body(stack, flag, PARKWAY_LOCKED_BODY_S="0.2")
    # Then while it still runs, its claim is committed as a lease (the sweep and readers see it claimed)
    wait_for(lambda: _resume(run_id).status == "claimed", timeout=30, what="the lock turned into a lease")
    assert _resume(run_id).attempts == 1
    assert run_status(run_id) == "running"
    # And the body then completes on the lease, once
    flag.touch()
    run = wait_status(run_id, "completed", timeout=60)
    assert run.result == {"go": "ship", "attempt": 1}
    assert effects(run_id, "slow_done") == 1
    assert (_resume(run_id).status, _resume(run_id).attempts) == ("consumed", 1)
