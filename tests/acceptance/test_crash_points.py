"""Each crash point of the resume path: the process dies there, is restarted without the variable, and
the sweep (or redelivery) drives the work to exactly one committed effect."""

from __future__ import annotations

import pytest

from tasks.sdk import answer
from tests.support import (
    HUMAN,
    Stack,
    continuations,
    effects,
    event_types,
    new_response_id,
    start,
    wait_for,
    wait_parked,
    wait_status,
)

pytestmark = pytest.mark.usefixtures("own_workers")


WORKER_POINTS = ["resume.after_claim", "resume.before_commit", "resume.after_commit", "publish.before_send"]


def _parked(stack: Stack, workflow: str, payload: dict[str, object], n: int = 1) -> list[tuple[str, dict[str, object]]]:
    """Runs parked by a clean worker, which is then killed while idle (nothing in flight)."""
    clean = stack.start_worker()
    run_ids = [start(workflow, payload) for _ in range(n)]
    parked = [(run_id, wait_parked(run_id)) for run_id in run_ids]
    clean.kill()
    return parked  # type: ignore[return-value]


@pytest.fixture(scope="module")
def parked_runs(stack: Stack) -> dict[str, tuple[str, dict[str, object]]]:
    """A parked run for each worker crash test, all parked by one clean worker: a parked run has nothing in
    flight (its question has no expiry), so it waits untouched until its test answers it."""
    return dict(zip(WORKER_POINTS, _parked(stack, "t.ask_one", {"then": "t.after"}, n=len(WORKER_POINTS)), strict=True))


@pytest.mark.parametrize("point", WORKER_POINTS)
def test_worker_crash_point__restart_drives_work_to_one_commit(
    stack: Stack, parked_runs: dict[str, tuple[str, dict[str, object]]], point: str
) -> None:
    # Given a run parked whose continuation hands over to a next step (so publishing matters too)
    run_id, asked = parked_runs[point]
    # When a worker that dies at the point resumes it
    crashing = stack.start_worker(PARKWAY_CRASH_AT=point)
    answer(asked["go"].id, "ship", response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]
    wait_for(lambda: f"crash point {point} reached" in crashing.text(), timeout=30, what=f"crash at {point}")
    crashing.kill()
    # Then a restarted worker, with the sweep, completes the run with exactly one committed effect
    stack.start_worker()
    run = wait_status(run_id, "completed", timeout=60)
    assert run.result == {"after": {"go": "ship"}}
    assert effects(run_id, "after") == 1
    assert all(c.status == "consumed" for c in continuations(run_id))
    assert event_types(run_id).count("run.completed") == 1


@pytest.mark.parametrize("point", ["answer.after_commit", "publish.before_send"])
def test_answering_process_crash__sweep_publishes_the_due_continuation(stack: Stack, point: str) -> None:
    # Given a parked run and a live worker
    stack.start_worker()
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    # When the process answering dies after its commit, before its publish
    result = stack.run_python(
        "from tasks.sdk import answer\n"
        f"answer({asked['go'].id!r}, 'late', response_id='r-crash', principal={HUMAN!r})\n",
        PARKWAY_CRASH_AT=point,
    )
    assert result.returncode == 137, result.stderr
    assert f"crash point {point} reached" in result.stderr
    resume = [c for c in continuations(run_id) if c.kind == "resume"]
    assert len(resume) == 1  # the answer committed and made the continuation due
    # Then the sweep publishes it and it is consumed exactly once
    run = wait_status(run_id, "completed", timeout=60)
    assert run.result == {"go": "late"}
    assert effects(run_id, "one_done") == 1
    # An exact retry of the answer returns the committed receipt
    again = answer(asked["go"].id, "late", response_id="r-crash", principal=HUMAN)
    assert again["status"] == "answered"


def test_sweep_crash_mid_batch__next_pass_publishes_the_rest(stack: Stack) -> None:
    # Given three answered runs whose messages were lost with the broker
    parked = _parked(stack, "t.ask_one", {}, n=3)
    for _, asked in parked:
        answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]
    stack.flush_broker()
    # When a sweep dies after publishing the first of them
    result = stack.parkway("sweep", "--once", PARKWAY_CRASH_AT="sweep.mid_batch", PARKWAY_REENQUEUE_AFTER_S="0")
    assert result.returncode == 137, result.stderr
    assert "crash point sweep.mid_batch reached" in result.stderr
    # Then a worker and later sweeps complete every run exactly once
    stack.start_worker()
    for run_id, _ in parked:
        wait_status(run_id, "completed", timeout=60)
        assert effects(run_id, "one_done") == 1
