"""Integration fixtures: the broker is replaced by a recorder, so what was published can be asserted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.helpers import Sent, make_actors, purge_queues


@pytest.fixture(autouse=True)
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Record every task publish instead of sending it (no worker consumes in these tests); the broker's
    queues start empty, as the sweep reads their length (``purge_queues``)."""
    from tasks.celery_app import app

    purge_queues()
    record = Sent()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        record.calls.append((name, args[0] if args else None, options.get("queue")))

    monkeypatch.setattr(app, "send_task", send_task)
    return record


@pytest.fixture
def actors_db(fresh_db: str) -> Iterator[str]:
    """A clean database of this test's own, with bot, ana, eve and boss as in ``stack``."""
    make_actors()
    yield fresh_db
