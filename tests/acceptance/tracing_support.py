"""What the tracing acceptance tests share (issue 44): a real OTLP/HTTP receiver behind a real stack (uvicorn
and a Celery worker, each exporting with the SDK), one per test module, and the reads of what they exported."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from models.tables import Interaction
from parkway.db import transaction
from tests.acceptance.conftest import remote_principals
from tests.acceptance.otlp_receiver import Receiver, Span
from tests.acceptance.trace_workflows import ASK
from tests.api.conftest import ApiServer
from tests.support import TARGET, Stack, wait_for

CONSUMER, SERVER = 5, 2
TRACE_URL = "https://jaeger.example/trace/{trace_id}"
CODE = "493817"  # the sensitive answer: never in an exported byte
IMPORTS = f"{os.environ.get('PARKWAY_IMPORTS', 'tests.workflows')},tests.acceptance.trace_workflows"


@dataclass
class Traced:
    receiver: Receiver
    http: httpx.Client
    tokens: dict[str, str]
    stack: Stack
    env: dict[str, str]

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def start(self, payload: dict[str, Any] | None = None) -> str:
        made = self.http.post("/v1/runs", json={"workflow": ASK, "payload": payload or {}, "target": TARGET},
                              headers=self.auth("tr-agent"))  # fmt: skip
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def answer(self, interaction_id: str, response_id: str = "r-1") -> httpx.Response:
        value = {"user": "ana", "otp": CODE}
        return self.http.post(f"/v1/interactions/{interaction_id}/answer", headers=self.auth("tr-human"),
                              json={"value": value, "response_id": response_id})  # fmt: skip

    def span(self, name: str, **attributes: Any) -> Span:
        wait_for(lambda: self.receiver.named(name, **attributes), timeout=30, what=f"span {name} {attributes}")
        found = self.receiver.named(name, **attributes)
        assert len(found) == 1, found
        return found[0]


@pytest.fixture(scope="module")
def traced(stack: Stack) -> Iterator[Traced]:
    receiver = Receiver().start()
    env = {**receiver.env(), "PARKWAY_IMPORTS": IMPORTS}
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-traced.log").start(
        PARKWAY_TRACE_URL=TRACE_URL, **env
    )
    worker = stack.start_worker(**env)
    try:
        with api.client() as http:
            names = ("tr-admin", "tr-agent", "tr-human", "tr-worker")
            tokens = remote_principals(http, **dict(zip(("admin", "agent", "human", "worker"), names, strict=True)))
            yield Traced(receiver, http, tokens, stack, env)
    finally:
        api.stop()
        worker.kill()
        receiver.stop()


def waits(run_id: str) -> list[Interaction]:
    with transaction() as session:
        return list(session.scalars(select(Interaction).where(Interaction.run_id == run_id)).all())


def parked(run_id: str) -> Interaction:
    wait_for(lambda: waits(run_id), timeout=30, what=f"run {run_id} parked")
    (wait,) = waits(run_id)
    return wait


def ids_of(traceparent: str | None) -> tuple[str, str]:
    """The (trace id, span id) a stored W3C traceparent names."""
    assert traceparent is not None
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def in_trace(t: Traced, trace_id: str, name: str) -> Span:
    wait_for(lambda: [s for s in t.receiver.named(name) if s.trace_id == trace_id], timeout=30, what=name)
    (found,) = [s for s in t.receiver.named(name) if s.trace_id == trace_id]
    return found
