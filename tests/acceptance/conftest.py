"""Acceptance fixtures: tests that start their own workers stop every one of them, before and after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.acceptance.protocol_support import Proto
from tests.acceptance.webhook_receiver import Receiver
from tests.api.conftest import ApiServer, make_admin
from tests.support import TARGET, Stack


@pytest.fixture
def own_workers(stack: Stack) -> Iterator[None]:
    """No worker outlives the test that started it (a leftover would take the next test's messages)."""
    stack.stop_all()
    yield
    stack.stop_all()


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[TestClient]:
    """The API in this process, sending an admin's token with every request."""
    from api.app import app

    with TestClient(app, headers={"Authorization": f"Bearer {make_admin('acceptance-root')}"}) as admin_client:
        yield admin_client


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 of this test's own (tests/acceptance/webhook_receiver.py)."""
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def proto(stack: Stack) -> Iterator[Proto]:
    """A uvicorn of its own and a Celery worker, and the tokens of a worker, an agent, a human and an admin;
    its keys advertised (a module's tests share it)."""
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-proto.log").start()
    celery = stack.start_worker()
    try:
        with api.client() as http:
            tokens = {"admin": make_admin("proto-admin")}
            admin = {"Authorization": f"Bearer {tokens['admin']}"}
            for who, kind in (("agent", "agent"), ("human", "human"), ("worker", "worker")):
                made = http.post("/v1/principals", json={"kind": kind, "name": f"proto-{who}"}, headers=admin)
                assert made.status_code == 201, made.text
                tokens[who] = made.json()["token"]
            for who in ("agent", "human"):
                granted = http.post("/v1/grants", json={"principal": f"proto-{who}", "target": TARGET}, headers=admin)
                assert granted.status_code == 201, granted.text
            proto = Proto(http=http, tokens=tokens, celery=celery)
            assert proto.lease(wait_s=0) == []  # advertises what it serves: from now on its keys are served
            yield proto
    finally:
        api.stop()
        celery.kill()
