"""A push handler on 127.0.0.1 for the acceptance tests (docs/worker-protocol.md, "Push"): it verifies every
request with the ``standardwebhooks`` package and answers what the test scripted (the ``handler`` fixture,
conftest.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import standardwebhooks
from fastapi.testclient import TestClient

DROP = -1  # close the connection without answering
SLOW = -2  # answer 200 after PARKWAY_WEBHOOK_TIMEOUT_S (2 s): a timeout


@dataclass
class Handler:
    """A push handler on 127.0.0.1: answers ``script`` in turn (a status and a body), then ``last``; while
    ``gate`` is set to an unset event, each request waits for it before it is answered."""

    script: list[tuple[int, Any]] = field(default_factory=list)
    last: tuple[int, Any] = (200, {"type": "complete", "result": "done"})
    secret: str = ""
    got: list[dict[str, Any]] = field(default_factory=list)  # verified requests: webhook-id, item
    unverified: int = 0
    gate: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/push"

    def answer(self, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        with self.lock:
            try:
                item = standardwebhooks.Webhook(self.secret).verify(body, headers)
            except standardwebhooks.WebhookVerificationError:
                self.unverified += 1
                return 401, {"error": "unverified"}
            self.got.append({"id": headers["webhook-id"], "item": item, "traceparent": headers.get("traceparent")})
            gate, answer = self.gate, self.script.pop(0) if self.script else self.last
        if gate is not None:
            assert gate.wait(timeout=60), "the test never opened the handler's gate"
        return answer


@contextmanager
def serving() -> Iterator[Handler]:
    """A ``Handler`` listening until the block ends."""
    handler = Handler()

    class Http(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            status, answer = handler.answer({k.lower(): v for k, v in self.headers.items()}, body)
            if status == DROP:
                self.close_connection = True
                return
            if status == SLOW:
                threading.Event().wait(3)
                status = 200
            raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    handler.server = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=handler.server.serve_forever, daemon=True).start()
    try:
        yield handler
    finally:
        handler.server.shutdown()
        handler.server.server_close()


def register(client: TestClient, handler: Handler, serves: list[str]) -> dict[str, Any]:
    """``handler`` registered for ``serves`` by an admin (``client``); its signing secret noted."""
    made = client.post("/v1/handlers", json={"url": handler.url, "serves": serves})
    assert made.status_code == 201, made.text
    handler.secret = made.json()["secret"]
    return dict(made.json())
