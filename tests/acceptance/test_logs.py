"""Structured logs from a real worker: JSON lines (its stderr is not a terminal), ids on every line of
an execution, no answer values."""

from __future__ import annotations

import json
import uuid

import pytest

from tasks.sdk import answer
from tests.support import HUMAN, Stack, new_response_id, start, wait_parked, wait_status

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
