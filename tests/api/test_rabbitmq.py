"""RabbitMQ as the broker (the README says it works): the API, a worker and beat on a vhost of this module's
own, driven over HTTP. Its delivery differs from Redis's where it matters to exactly-once: an unacked
message of a killed worker comes back at once, flagged redelivered, and a connection the broker drops is
found dead by the next publish."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import AGENT, HUMAN, Actors, ApiServer, make_actors
from tests.proxy import Proxy
from tests.support import TARGET, Stack, Worker, effects, wait_for

RABBITMQ = ("127.0.0.1", 5672)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def vhost(stack: Stack) -> Iterator[str]:
    """A vhost of this module's own (no other session's queues), removed at the end, once nothing of the
    module uses it."""
    name = f"parkway-test-{uuid.uuid4().hex[:8]}"
    try:
        _rabbitmqctl("add_vhost", name)
        _rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    except (OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("PARKWAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"required service unavailable: RabbitMQ (rabbitmqctl): {exc}")
        pytest.skip(f"service unavailable: RabbitMQ (rabbitmqctl): {exc}")
    try:
        yield name
    finally:
        stack.stop_all()  # this module's workers and beat, before their vhost goes
        _rabbitmqctl("delete_vhost", name)


def amqp_url(vhost: str, port: int = RABBITMQ[1]) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/{vhost}"


class Live:
    def __init__(self, api: ApiServer, http: httpx.Client, actors: Actors) -> None:
        self.api, self.http, self.actors = api, http, actors

    def start(self, workflow: str, payload: dict[str, Any]) -> str:
        made = self.http.post("/v1/runs", json={"workflow": workflow, "payload": payload, "target": TARGET},
                              headers=self.actors.auth(AGENT))  # fmt: skip
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.http.get(f"/v1/runs/{run_id}", headers=self.actors.auth(HUMAN)).json()
        return found

    def wait_status(self, run_id: str, status: str, timeout: float = 40) -> dict[str, Any]:
        return wait_for(lambda: (run := self.run(run_id))["status"] == status and run, timeout=timeout,
                        what=f"run {run_id} {status}")  # fmt: skip

    def answer(self, run_id: str, value: str) -> httpx.Response:
        iid = self.wait_status(run_id, "waiting")["interactions"][0]["id"]
        body = {"response_id": uuid.uuid4().hex, "value": value}
        return self.http.post(f"/v1/interactions/{iid}/answer", json=body, headers=self.actors.auth(HUMAN))

    def answered(self, value: str) -> str:
        """A ``t.ask_one`` run started and its question answered with ``value`` (a 200 receipt)."""
        run_id = self.start("t.ask_one", {})
        receipt = self.answer(run_id, value)
        assert receipt.status_code == 200, receipt.text
        return run_id


@pytest.fixture(scope="module")
def broker_proxy() -> Iterator[Proxy]:
    """The API reaches RabbitMQ through this proxy (cut in the outage test); the worker and beat directly."""
    proxy = Proxy(RABBITMQ).start()
    try:
        yield proxy
    finally:
        proxy.cut()


@pytest.fixture(scope="module")
def live(stack: Stack, vhost: str, broker_proxy: Proxy) -> Iterator[Live]:
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-rabbitmq.log")
    api.start(PARKWAY_BROKER_URL=amqp_url(vhost, broker_proxy.port))
    stack.start_beat(PARKWAY_BROKER_URL=amqp_url(vhost))
    try:
        with api.client() as http:
            yield Live(api, http, make_actors(http))
    finally:
        api.stop()


def worker(stack: Stack, vhost: str) -> Worker:
    started = stack.start_worker(concurrency=1, PARKWAY_BROKER_URL=amqp_url(vhost))
    assert f"amqp://guest:**@127.0.0.1:5672/{vhost}" in started.text(), started.text()[-2000:]  # Celery's banner
    return started


@pytest.fixture
def resumer(stack: Stack, vhost: str) -> Iterator[Worker]:
    """A worker on the module's vhost for one test."""
    started = worker(stack, vhost)
    try:
        yield started
    finally:
        started.kill()


def test_on_rabbitmq__an_answered_run_completes_once(resumer: Worker, live: Live) -> None:
    run_id = live.answered("yes")
    assert live.wait_status(run_id, "completed")["result"] == {"go": "yes"}
    assert effects(run_id, "one_done") == 1
    # And the API is ready on it, and its metrics are served (queue depths are RabbitMQ's own to export)
    assert live.http.get("/readyz").status_code == 200
    assert live.http.get("/metrics").status_code == 200


def test_on_rabbitmq__a_worker_killed_in_the_body__its_redelivered_message_and_the_sweep_complete_it_once(
    stack: Stack, vhost: str, live: Live, tmp_path: Path
) -> None:
    # Given a continuation body running on a worker (its first attempt waits for a flag that never comes)
    flag = tmp_path / "go"
    first = worker(stack, vhost)
    run_id = live.start("t.ask_one", {"continuation": "t.slow_done@1", "flag": str(flag)})
    assert live.answer(run_id, "yes").status_code == 200
    wait_for(lambda: Path(f"{flag}.running").exists(), timeout=30, what="the continuation body to start")
    # When that worker is killed and another one consumes the queue (RabbitMQ gives it the unacked message
    # at once, redelivered, while the dead execution's lease still runs)
    first.kill()
    second = worker(stack, vhost)
    try:
        # Then the run completes once, on a later attempt, the body's effect recorded once
        done = live.wait_status(run_id, "completed", timeout=60)
        assert done["result"]["attempt"] >= 2
        assert effects(run_id, "slow_done") == 1
    finally:
        second.kill()


def test_on_rabbitmq__a_worker_loses_its_connection_mid_body__the_body_runs_on_and_commits_once(
    stack: Stack, vhost: str, live: Live, tmp_path: Path
) -> None:
    # Given a continuation body running on a worker that reaches RabbitMQ through a proxy
    flag = tmp_path / "go"
    proxy = Proxy(RABBITMQ).start()
    behind = stack.start_worker(concurrency=1, PARKWAY_BROKER_URL=amqp_url(vhost, proxy.port))
    try:
        run_id = live.start("t.ask_one", {"continuation": "t.slow_done@1", "flag": str(flag)})
        assert live.answer(run_id, "yes").status_code == 200
        wait_for(lambda: Path(f"{flag}.running").exists(), timeout=30, what="the continuation body to start")
        # When its broker connection drops (RabbitMQ gives the unacked message back) and comes back
        proxy.cut()
        proxy.restore()
        flag.touch()
        # Then the body was not cancelled: the first execution commits, once, on attempt 1
        done = live.wait_status(run_id, "completed", timeout=60)
        assert done["result"]["attempt"] == 1, done
        assert effects(run_id, "slow_done") == 1
    finally:
        behind.kill()
        proxy.cut()


def test_on_rabbitmq__a_connection_the_broker_dropped__the_next_answer_is_published_at_once(
    resumer: Worker, live: Live, broker_proxy: Proxy
) -> None:
    # Given the API's pooled connection to RabbitMQ made (an answer published through it), then dropped by
    # the broker's side while RabbitMQ stays up (as when an operator closes connections, or a node restarts)
    live.wait_status(live.answered("yes"), "completed")
    broker_proxy.cut()
    broker_proxy.restore()
    failures = live.api.text().count("publish failed")
    # When a person answers
    run_id = live.answered("now")
    # Then the API found the connection dead, sent it on a new one, and left nothing to the sweep
    assert live.wait_status(run_id, "completed")["result"] == {"go": "now"}
    lines = live.api.text().splitlines()
    assert sum("publish failed" in line for line in lines) == failures, [ln for ln in lines if "publish" in ln]
    assert effects(run_id, "one_done") == 1


def test_on_rabbitmq__the_api_loses_its_broker_connection__the_answer_commits_and_the_sweep_publishes_it(
    resumer: Worker, live: Live, broker_proxy: Proxy
) -> None:
    # Given the API's connection to RabbitMQ made (a first answer published through it), then dropped
    live.wait_status(live.answered("yes"), "completed")
    broker_proxy.cut()
    # When a person answers: the receipt comes back and the answer is committed
    run_id = live.answered("later")
    wait_for(lambda: "publish failed" in live.api.text(), timeout=30, what="the API's publish-failed line")
    not_ready = live.http.get("/readyz")
    assert not_ready.status_code == 503 and "broker is unreachable" in not_ready.json()["detail"], not_ready.text
    # Then beat's sweep publishes the continuation, and the run completes once
    assert live.wait_status(run_id, "completed", timeout=60)["result"] == {"go": "later"}
    assert effects(run_id, "one_done") == 1
    # And once the broker can be reached again, the API publishes as before
    broker_proxy.restore()
    live.wait_status(live.answered("again"), "completed")
    assert live.http.get("/readyz").status_code == 200
