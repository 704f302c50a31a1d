"""A receiver of webhooks for the acceptance tests: an HTTP server on 127.0.0.1 started by the test, which
verifies every request with the ``standardwebhooks`` package (the specification's own library, not our
code) and records what it got; and the run whose events it receives."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import standardwebhooks
from fastapi.testclient import TestClient
from sqlalchemy import select

import tests.acceptance.webhook_workflows  # noqa: F401  (registers the workflow in this process too)
from models.tables import Event
from parkway.db import transaction
from tasks.sdk import answer
from tests.support import HUMAN, new_response_id, start, wait_for, wait_parked, wait_status

IMPORTS = "tests.workflows,tests.acceptance.webhook_workflows"  # what the workers import
OTP = "917364"  # the sensitive field's value: in no request body, ever


DROP = 0  # a script entry's status: close the connection without answering
SLEEP = "x-test-sleep"  # a script entry's header: seconds to wait before answering


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 answering ``script`` in turn (then 204), recording each request: a
    status and headers per entry (``DROP``: no answer at all; header ``SLEEP``: answer that much later)."""

    url: str = ""
    secret: str = ""
    also: list[str] = field(default_factory=list)  # secrets every request must verify with too (a rotation)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)  # verified requests: id, status answered, body
    unverified: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # While ``held`` is set, a request is held open (``arrived`` says one came) until the test lets it go.
    held: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None
    delay_s: float = 0.0  # how long each request takes to answer
    in_flight: int = 0
    most_in_flight: int = 0  # the most requests it held open at once

    def start(self) -> Receiver:
        self.server = serve(self)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        return self

    def stop(self) -> None:
        self.held.clear()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            threading.Event().wait(self.delay_s)
            return self._answer(headers, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        if self.held.is_set():
            self.arrived.set()
            while self.held.is_set():
                threading.Event().wait(0.05)
        with self.lock:
            try:
                payload = standardwebhooks.Webhook(self.secret).verify(body, headers)
                for secret in self.also:
                    standardwebhooks.Webhook(secret).verify(body, headers)
            except standardwebhooks.WebhookVerificationError:
                self.unverified += 1
                return 400, {}
            status, extra = self.script.pop(0) if self.script else (204, {})
            extra = dict(extra)
            self.got.append({"id": headers["webhook-id"], "status": status, "body": payload, "raw": body})
            return status, extra

    def delivered(self) -> list[dict[str, Any]]:
        """The bodies answered 2xx, in the order they arrived."""
        with self.lock:
            return [r["body"] for r in self.got if 200 <= r["status"] < 300]

    def of_run(self, run_id: str) -> list[tuple[int, str]]:
        """(seq, type) of the run's events answered 2xx, in the order each first arrived."""
        firsts: list[tuple[int, str]] = []
        for body in self.delivered():
            item = (body["data"]["seq"], body["type"])
            if body["data"]["run_id"] == run_id and item not in firsts:
                firsts.append(item)
        return firsts

    def ids_name_one_event_each(self) -> bool:
        """Every webhook-id names one event, and every event has one webhook-id."""
        with self.lock:
            pairs = {(r["id"], r["body"]["data"]["seq"]) for r in self.got}
        return len(pairs) == len({i for i, _ in pairs}) == len({s for _, s in pairs})


def serve(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            status, extra = receiver.handle({k.lower(): v for k, v in self.headers.items()}, body)
            if status == DROP:  # as a receiver going down mid-request: the connection closes, no answer
                self.close_connection = True
                return
            threading.Event().wait(float(extra.pop(SLEEP, 0)))  # past PARKWAY_WEBHOOK_TIMEOUT_S: a timeout
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


def complete_and_deliver(receiver: Receiver, run_ids: list[str], *, timeout: float = 60.0, sweep: bool = False) -> None:
    """Answer each parked run, wait for it to complete, and for every event of it to reach ``receiver``
    (answered 2xx), in ``seq`` order."""
    for run_id in run_ids:
        asked = wait_parked(run_id, timeout=timeout)
        answer(asked["otp"].id, {"user": "ana", "otp": "123456"}, response_id=new_response_id(), principal=HUMAN)
    for run_id in run_ids:
        wait_status(run_id, "completed", timeout=timeout)
        expected = run_events(run_id)
        delivered = lambda: receiver.of_run(run_id) == expected  # noqa: B023, E731
        try:
            wait_for(delivered, sweep=sweep, timeout=timeout, what="every event delivered")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: of run {run_id}, {receiver.of_run(run_id)} != {expected}") from None
