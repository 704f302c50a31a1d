"""Acceptance fixtures: tests that start their own workers stop every one of them, before and after; the
principals and the lease receipts of the tests of agents in other languages (TypeScript, Go); a push handler."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from models import store
from models.webhook_tables import Webhook
from parkway.db import transaction
from tests.acceptance.protocol_support import Proto
from tests.acceptance.push_support import Handler, serving
from tests.acceptance.webhook_receiver import Receiver
from tests.api.conftest import ApiServer, make_admin
from tests.support import TARGET, Stack


def remote_principals(http: httpx.Client, *, admin: str, agent: str, human: str, worker: str) -> dict[str, str]:
    """Tokens by name for an agent in another language: an admin; an agent, a person and a worker granted on
    the target, made over the API by the admin (a worker leases only runs on targets it is granted on)."""
    made = {admin: make_admin(admin)}
    auth = {"Authorization": f"Bearer {made[admin]}"}
    for kind, name in (("agent", agent), ("human", human), ("worker", worker)):
        answer = http.post("/v1/principals", json={"kind": kind, "name": name}, headers=auth)
        assert answer.status_code == 201, answer.text
        made[name] = answer.json()["token"]
    for name in (agent, human, worker):
        grant = http.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=auth)
        assert grant.status_code == 201, grant.text
    return made


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
def receiver(stack: Stack) -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 of this test's own (tests/acceptance/webhook_receiver.py). Its
    subscriptions go with it: on the module's database they would go on delivering to a closed port, and
    their ``webhook.failing`` land in the next test's runs."""
    receiver = Receiver().start()
    yield receiver
    receiver.stop()
    with transaction() as session:
        for webhook_id in session.scalars(select(Webhook.id).where(Webhook.url == receiver.url)).all():
            store.delete_webhook(session, webhook_id)


@pytest.fixture(scope="module")
def proto_stack(stack: Stack) -> Iterator[Proto]:
    """A uvicorn of its own and a Celery worker, and the tokens of a worker, an agent, a human and an admin
    (a module's tests share it; each test takes a target and a worker of its own: ``proto``)."""
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-proto.log").start()
    celery = stack.start_worker()
    try:
        with api.client() as http:
            roles = ("admin", "agent", "human", "worker")
            made = remote_principals(http, **{role: f"proto-{role}" for role in roles})
            yield Proto(http=http, tokens={role: made[f"proto-{role}"] for role in roles}, celery=celery)
    finally:
        api.stop()
        celery.kill()


@pytest.fixture
def proto(proto_stack: Proto) -> Proto:
    """``proto_stack`` on a target of this test's own, with a worker granted on it alone (its keys advertised):
    it leases what this test made, never an earlier test's leftovers."""
    return proto_stack.for_test()


@pytest.fixture
def handler() -> Iterator[Handler]:
    """A push handler on 127.0.0.1 of this test's own (tests/acceptance/push_support.py)."""
    with serving() as handler:
        yield handler
