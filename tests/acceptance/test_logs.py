"""Structured logs from a real worker: JSON lines (its stderr is not a terminal), ids on every line of
an execution, no answer values; a sweep pass that found nothing says nothing, one that did says one sentence."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tasks.celery_app import SWEEP, SWEEP_QUEUE, app
from tasks.sdk import answer
from tests.support import (
    HUMAN,
    Stack,
    Worker,
    new_response_id,
    pass_time,
    start,
    sweeps_done,
    wait_for,
    wait_parked,
    wait_status,
)

pytestmark = pytest.mark.usefixtures("own_workers")


def test_worker_logs__json_lines_with_ids_and_no_values(stack: Stack) -> None:
    worker = stack.start_worker()
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    value = f"value-{uuid.uuid4().hex}"
    answer(asked["go"].id, value, response_id=new_response_id(), principal=HUMAN)
    wait_status(run_id, "completed")
    assert worker.terminate() == 0
    records = []
    for line in worker.text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    assert records, "the worker wrote no JSON log lines"
    # Every line logged while a continuation of this run executed carries its ids, and each execution's
    # outcome is one line: Celery's own about the task, with the ids and the step's outcome on it
    ours = [r for r in records if r.get("run_id") == run_id]
    assert all(r.get("continuation_id") and r.get("execution_id") and r.get("step_id") for r in ours)
    outcomes = [r for r in ours if r["logger"] == "celery.app.trace" and " succeeded in " in r["message"]]
    assert sorted(r.get("outcome") for r in outcomes) == ["Complete", "Park"], ours
    assert all(r["message"].endswith(": 'committed'") for r in outcomes), outcomes
    assert len({r["execution_id"] for r in outcomes}) == 2
    # Celery's own lines are structured too
    assert any(r["logger"].startswith("celery") for r in records)
    assert value not in worker.text()


def _records(worker: Worker) -> list[dict[str, Any]]:
    return [json.loads(line) for line in worker.text().splitlines() if line.startswith("{")]


def _about_sweeps(worker: Worker) -> list[str]:
    """The worker's log lines about sweep passes: the sweep's own, and Celery's about its task."""
    return [r["message"] for r in _records(worker) if r["logger"] == "parkway.sweep" or f"{SWEEP}[" in r["message"]]


def test_sweep_logs__idle_passes_say_nothing__a_pass_that_re_drives_says_one_sentence(stack: Stack) -> None:
    # Given nothing due (a pass here first: it seals what the module's earlier tests logged), an idle worker,
    # and its startup pass and five more passes over nothing
    from beat.sweep import run_sweep

    run_sweep()
    passes = sweeps_done()  # before the worker starts: its startup pass may end before it is seen ready
    idle = stack.start_worker(concurrency=1)
    wait_for(lambda: sweeps_done() > passes, timeout=30, what="the worker's startup sweep")
    for _ in range(5):
        app.send_task(SWEEP, queue=SWEEP_QUEUE)
    wait_for(lambda: sweeps_done() >= passes + 6, timeout=30, what="six idle sweep passes")
    # Then its log says nothing about them
    assert _about_sweeps(idle) == [], idle.text()[-3000:]

    # When a run's start is lost (no worker up, the broker flushed) and a worker starts: its startup pass
    idle.kill()
    run_id = start("t.ask_one")
    stack.flush_broker()
    pass_time(5)
    worker = stack.start_worker(concurrency=1)
    wait_parked(run_id, sweep=False)
    # Then that pass said what it did, in one sentence
    first, *_ = _about_sweeps(worker) or [""]
    assert first.startswith("sweep: re-drove 1 continuation"), worker.text()[-3000:]
    assert all(line.startswith("sweep: ") for line in _about_sweeps(worker)), _about_sweeps(worker)
