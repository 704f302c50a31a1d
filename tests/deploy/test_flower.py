"""Flower (issue 7, part 3): a real ``celery flower`` subprocess against the test broker shows the worker,
its named queues and the tasks of a run, whose arguments are continuation ids and nothing else.

Both brokers (a ``broker`` module): on Redis events travel by PUBLISH and remote control by fanout lists; on
the embedded filesystem broker kombu keeps the fanout and topic bindings in ``control/*.exchange`` files, so
Flower's inspect broadcasts and its event queue work across processes there too.
"""

from __future__ import annotations

import ast
import json
import socket
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from api.metrics import queue_depths
from parkway.settings import get_settings
from tasks.celery_app import (
    CONTINUATIONS_QUEUE,
    PUSH_QUEUE,
    RESUME_STEP,
    RUN_STEP,
    STEPS_QUEUE,
    SWEEP,
    SWEEP_QUEUE,
    WEBHOOKS_QUEUE,
)
from tasks.celery_app import app as celery_app
from tasks.sdk import answer
from tests.deploy.flower import INSPECT_TIMEOUT_MS, Flower, unbind_stopped_event_receivers
from tests.support import (
    HUMAN,
    Stack,
    Worker,
    child_env,
    continuations,
    new_response_id,
    start,
    wait_for,
    wait_parked,
    wait_status,
)

AUTH = ("parkway", "flower-" + uuid.uuid4().hex)


@pytest.fixture(scope="module")
def flower(stack: Stack) -> Iterator[Flower]:
    """Flower first, so its event receiver is listening before any worker or task exists."""
    server = Flower.start(env=child_env(stack.database_url), log=stack.logs / "flower.log", auth=AUTH)
    try:
        wait_for(server.answers, timeout=40, what=f"flower on {server.url}")
        yield server
    finally:
        server.stop()
        if stack.broker == "filesystem":
            unbind_stopped_event_receivers(get_settings().broker_folder)


@pytest.fixture(scope="module")
def worker(stack: Stack, flower: Flower) -> Worker:
    # Task events are off by default: Flower turns them on (its periodic ``enable_events``), as on ``parkway up``.
    return stack.start_worker(heartbeat=True)


def listed_worker(flower: Flower, worker: Worker) -> dict[str, Any]:
    """The worker as ``/api/workers`` lists it after an inspect of that one worker, or ``{}``.

    Inspecting one named worker waits for its reply alone (up to Flower's ``--inspect_timeout``), where a
    broadcast to all waits the whole timeout and keeps only the replies that came in by then."""
    hostname = f"{worker.name}@{socket.gethostname()}"  # the worker's `-n name@%h`
    wait_s = INSPECT_TIMEOUT_MS / 1000
    response = flower.get("/api/workers", refresh=1, workername=hostname, timeout=wait_s + 10)
    if response.status_code == 404:  # no reply within the inspect timeout: Flower does not know it yet
        return {}
    assert response.status_code == 200, f"{response.status_code} {response.text[:500]}"
    info = response.json().get(hostname) or {}
    return dict(info) if info.get("active_queues") and info.get("registered") else {}


def listed_tasks(flower: Flower, name: str) -> dict[str, dict[str, Any]]:
    return dict(flower.api("/api/tasks", taskname=name, limit=1000))


def succeeded_task(flower: Flower, name: str, continuation_id: str) -> dict[str, Any]:
    """The succeeded task ``name`` whose arguments name ``continuation_id``, as Flower lists it, or ``{}``."""
    for task in listed_tasks(flower, name).values():
        if continuation_id in (task.get("args") or "") and task.get("state") == "SUCCESS":
            return task
    return {}


def wait_events_flowing(flower: Flower) -> None:
    """Until Flower has received a task event from a worker: send a sweep (harmless) each second."""
    last_sent = [0.0]

    def seen() -> bool:
        if any(task.get("worker") for task in listed_tasks(flower, SWEEP).values()):
            return True
        if time.monotonic() - last_sent[0] > 1.0:
            celery_app.send_task(SWEEP, queue=SWEEP_QUEUE)
            last_sent[0] = time.monotonic()
        return False

    wait_for(seen, timeout=30, what="flower to receive task events")


def test_flower__healthcheck_is_open_and_the_api_needs_basic_auth(flower: Flower) -> None:
    assert flower.get("/healthcheck", anonymous=True).status_code == 200
    assert flower.get("/api/workers", anonymous=True).status_code == 401
    assert flower.get("/api/tasks", anonymous=True).status_code == 401
    assert flower.get("/api/workers", auth=(AUTH[0], "wrong")).status_code == 401
    assert flower.get("/api/workers").status_code == 200


def test_flower__its_own_metrics_answer_without_its_login(flower: Flower) -> None:
    # Flower 2.x serves /metrics outside --basic-auth (it has no option to put it behind the login), so
    # docs/operations.md says to keep Flower's port private: bound to 127.0.0.1 or behind a proxy.
    anonymous = flower.get("/metrics", anonymous=True)
    assert anonymous.status_code == 200
    assert "flower_" in anonymous.text
    assert flower.get("/api/queues/length", anonymous=True).status_code == 401  # its API stays behind it


def test_flower__queue_length_on_redis_agrees_with_parkways_own(stack: Stack, flower: Flower) -> None:
    def flower_lengths() -> dict[str, int]:
        response = flower.get("/api/queues/length")
        assert response.status_code == 200, response.text
        return {queue["name"]: queue["messages"] for queue in response.json()["active_queues"]}

    if stack.broker == "filesystem":
        # The embedded filesystem broker: Flower cannot read it (Parkway's parkway_queue_length can)
        response = flower.get("/api/queues/length")
        assert response.status_code == 404 and "broker is not supported" in response.text
        return
    # Given two sweep messages waiting and no worker consuming (this module starts its worker later)
    before = flower_lengths()
    assert {STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE} <= set(before)
    for _ in range(2):
        celery_app.send_task(SWEEP, queue=SWEEP_QUEUE)
    # Then Flower's queue length counts them, as Parkway's own reading of the broker does
    after = wait_for(
        lambda: (lengths := flower_lengths())[SWEEP_QUEUE] == before[SWEEP_QUEUE] + 2 and lengths,
        timeout=10,
        what="flower to count the two messages",
    )
    depths = queue_depths()
    assert depths is not None
    assert {name: after[name] for name in depths.length} == depths.length


def test_flower__lists_the_worker_and_its_named_queues(flower: Flower, worker: Worker) -> None:
    info = wait_for(lambda: listed_worker(flower, worker), timeout=60, what="flower to list the worker")
    names = {queue["name"] for queue in info["active_queues"]}
    direct = {name for name in names if name.endswith(".dq2")}
    assert names - direct == {STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE, PUSH_QUEUE}
    assert len(direct) == 1  # its own queue, where a worker that lacks a version hands a delivery on to it
    assert {RUN_STEP, RESUME_STEP, SWEEP} <= set(info["registered"])


def test_flower__shows_run_and_resume_tasks_with_the_run_step_and_version_they_serve_and_only_ids(
    flower: Flower, worker: Worker
) -> None:
    # Given: Flower receives this worker's task events.
    wait_events_flowing(flower)
    payload_marker = "payload-" + uuid.uuid4().hex
    answer_marker = "answer-" + uuid.uuid4().hex

    # When: a run parks, is answered and completes.
    run_id = start("t.ask_one", {"note": payload_marker})
    asked = wait_parked(run_id)
    answer(asked["go"].id, answer_marker, response_id=new_response_id(), principal=HUMAN)
    assert wait_status(run_id, "completed").result == {"go": answer_marker}
    rows = {c.kind: c for c in continuations(run_id)}
    ids = {kind: c.id for kind, c in rows.items()}
    assert set(ids) == {"start", "resume"}
    serves = {"start": "t.ask_one", "resume": "t.one_done@1"}

    # Then: Flower lists both tasks, succeeded on this worker, each with one argument, the continuation id,
    # and shown with the run, step and version it serves (kwargsrepr: searchable by the run's id)
    for name, kind in ((RUN_STEP, "start"), (RESUME_STEP, "resume")):
        task = wait_for(
            partial(succeeded_task, flower, name, ids[kind]),
            timeout=30,
            what=f"flower to list {name} for continuation {ids[kind]}",
        )
        assert task["worker"].startswith(f"{worker.name}@")
        assert list(ast.literal_eval(task["args"])) == [ids[kind]]
        shown = {"run_id": run_id, "step_id": rows[kind].step_id, "serves": serves[kind]}
        assert ast.literal_eval(task["kwargs"]) == shown, task

    # And: nothing of the payload or the answer is anywhere in what Flower holds about any task.
    seen = json.dumps(flower.api("/api/tasks", limit=1000))
    for name in (RUN_STEP, RESUME_STEP):
        for task_id in listed_tasks(flower, name):
            seen += json.dumps(flower.api(f"/api/task/info/{task_id}"))
    assert payload_marker not in seen
    assert answer_marker not in seen
