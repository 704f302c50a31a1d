"""Webhook deliveries end to end: a real worker subprocess sends a run's events to a receiver started by the
test, which verifies every request with the ``standardwebhooks`` package (the specification's own library)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import standardwebhooks
from fastapi.testclient import TestClient
from sqlalchemy import select

import tests.acceptance.webhook_workflows  # noqa: F401  (registers the workflow in this process too)
from models.tables import Event
from models.webhook_tables import Webhook
from parkway.db import transaction
from tasks.sdk import answer
from tests.api.conftest import make_admin
from tests.support import HUMAN, Stack, new_response_id, start, wait_for, wait_parked, wait_status

IMPORTS = "tests.workflows,tests.acceptance.webhook_workflows"
OTP = "917364"  # the sensitive field's value: in no request body, ever


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 answering ``script`` in turn (then 204), recording each request."""

    url: str = ""
    secret: str = ""
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)  # verified requests: id, status answered, body
    unverified: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        with self.lock:
            try:
                payload = standardwebhooks.Webhook(self.secret).verify(body, headers)
            except standardwebhooks.WebhookVerificationError:
                self.unverified += 1
                return 400, {}
            status, extra = self.script.pop(0) if self.script else (204, {})
            self.got.append({"id": headers["webhook-id"], "status": status, "body": payload, "raw": body})
            return status, extra

    def delivered(self) -> list[dict[str, Any]]:
        """The bodies answered 2xx, in the order they arrived."""
        with self.lock:
            return [r["body"] for r in self.got if 200 <= r["status"] < 300]


def serve(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            status, extra = receiver.handle({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[TestClient]:
    """The API in this process, sending an admin's token with every request."""
    from api.app import app

    token = make_admin("wh-root")
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as admin_client:
        yield admin_client


@pytest.fixture(scope="module")
def worker(stack: Stack):  # type: ignore[no-untyped-def]
    return stack.start_worker(PARKWAY_IMPORTS=IMPORTS)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    server = serve(receiver)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield receiver
    server.shutdown()
    server.server_close()


def subscribe(client: TestClient, receiver: Receiver, **body: Any) -> dict[str, Any]:
    made = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["*"], **body})
    assert made.status_code == 201, made.text
    receiver.secret = made.json()["secret"]
    return dict(made.json())


def run_events(run_id: str) -> list[tuple[int, str]]:
    with transaction() as session:
        return [
            (e.seq, e.type) for e in session.scalars(select(Event).where(Event.run_id == run_id).order_by(Event.seq))
        ]


def login_run() -> str:
    """A run asked a question with a sensitive field, answered, completed."""
    run_id = start("wh.login")
    asked = wait_parked(run_id)
    answer(asked["otp"].id, {"user": "ana", "otp": OTP}, response_id=new_response_id(), principal=HUMAN)
    wait_status(run_id, "completed")
    return run_id


def test_deliveries__a_run_in_seq_order_signed_retried_with_the_same_ids(
    stack: Stack, worker: Any, client: TestClient, receiver: Receiver
) -> None:
    # Given a subscription whose receiver answers 500 twice, then 429 with Retry-After, then recovers
    receiver.script = [(500, {}), (500, {}), (429, {"retry-after": "1"})]
    hook = subscribe(client, receiver, targets=["team:ops"])

    # When a run asks a question with a sensitive field, is answered and completes
    run_id = login_run()
    expected = run_events(run_id)
    assert "interaction.asked" in [t for _, t in expected] and expected[-1][1] == "run.completed"

    # Then every event of the run reaches the receiver, once answered 2xx, in seq order
    def ours() -> list[dict[str, Any]]:
        return [b for b in receiver.delivered() if b["data"]["run_id"] == run_id]

    wait_for(lambda: len(ours()) >= len(expected), sweep=True, timeout=60, what="every event delivered")
    assert [(b["data"]["seq"], b["type"]) for b in ours()] == expected
    assert receiver.unverified == 0

    # And a retry carries the id of its first attempt: every webhook-id names one event, every event one id
    by_id: dict[str, set[int]] = {}
    for request in receiver.got:
        by_id.setdefault(request["id"], set()).add(request["body"]["data"]["seq"])
    assert all(len(seqs) == 1 for seqs in by_id.values())
    assert len({request["id"] for request in receiver.got}) == len({min(s) for s in by_id.values()})
    assert [r["status"] for r in receiver.got[:3]] == [500, 500, 429]
    assert len({r["id"] for r in receiver.got[:4]}) == 1  # the same event until it got through

    # And the question carries what a chat message needs; no body carries the sensitive value
    asked = next(b for b in ours() if b["type"] == "interaction.asked")["data"]["interaction"]
    assert asked["prompt"] == "Your code?" and asked["target"] == "team:ops" and asked["kind"] == "question"
    assert asked["schema"]["required"] == ["user", "otp"] and asked["link"].startswith("/decisions")
    assert all(OTP.encode() not in r["raw"] for r in receiver.got)

    # And the delivery log shows the failed attempts and their retries
    log = client.get(f"/v1/webhooks/{hook['id']}/deliveries?limit=200").json()["items"]
    failed = sorted((d for d in log if d["status_code"] in (500, 429)), key=lambda d: d["attempt"])
    assert [(d["status_code"], d["attempt"]) for d in failed] == [(500, 1), (500, 2), (429, 3)]
    assert all(d["next_attempt_at"] is not None and d["error"] for d in failed)
    assert client.get(f"/v1/webhooks/{hook['id']}").json()["status"] == "active"


def test_deliveries__410_disables_and_the_last_retry_marks_failing(
    stack: Stack, worker: Any, client: TestClient, receiver: Receiver
) -> None:
    # Given one receiver answering 410 to everything, and one answering 500 to everything
    receiver.script = [(410, {})] * 100
    gone = subscribe(client, receiver, events=["run.completed"])
    failing_receiver = Receiver(script=[(500, {})] * 100)
    server = serve(failing_receiver)
    failing_receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    failing = subscribe(client, failing_receiver, events=["run.completed"])

    # When a run completes
    login_run()

    # Then the first subscription is disabled after one attempt
    def status(hook_id: str) -> str:
        with transaction() as session:
            row = session.get(Webhook, hook_id)
            assert row is not None
            return row.status

    wait_for(lambda: status(gone["id"]) == "disabled", sweep=True, timeout=60, what="disabled on 410")
    assert len(receiver.got) == 1
    shown = client.get(f"/v1/webhooks/{gone['id']}").json()
    assert shown["status"] == "disabled" and "410" in shown["reason"]

    # And the other is failing after the schedule's retries (PARKWAY_WEBHOOK_RETRY_S: 3 delays, 4 attempts)
    wait_for(lambda: status(failing["id"]) == "failing", sweep=True, timeout=60, what="failing after the last retry")
    assert [r["status"] for r in failing_receiver.got] == [500] * 4
    assert "500" in client.get(f"/v1/webhooks/{failing['id']}").json()["reason"]

    # When it is re-enabled and its receiver recovers, it resumes from the event where it stopped
    failing_receiver.script = []
    assert client.patch(f"/v1/webhooks/{failing['id']}", json={"enabled": True}).status_code == 200
    wait_for(lambda: failing_receiver.delivered(), sweep=True, timeout=60, what="delivered after re-enabling")
    assert failing_receiver.got[-1]["id"] == failing_receiver.got[0]["id"]
    server.shutdown()
    server.server_close()
