"""Acceptance fixtures: tests that start their own workers stop every one of them, before and after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.acceptance.webhook_receiver import Receiver
from tests.api.conftest import make_admin
from tests.support import Stack


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
