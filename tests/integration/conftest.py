"""Integration fixtures: the broker is replaced by a recorder, so what was published can be asserted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from parkway.settings import reset_settings
from tasks.projection import drain_projections
from tests.acceptance.seeding import keep_rows, put_back_rows
from tests.conftest import database_of_its_own
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


@pytest.fixture(scope="module")
def sweep_module_db(template_db: str) -> Iterator[str]:
    """A clone of the template with the actors (what each test had a clone of its own of), its rows kept for
    ``swept_db`` to put back: one database and one engine for the module, not a database made and dropped for
    each test (a drop forces a checkpoint) and an engine whose statements are compiled anew."""
    with database_of_its_own(template_db) as url:
        make_actors()
        keep_rows()
        yield url


@pytest.fixture
def swept_db(sweep_module_db: str) -> Iterator[str]:
    """For the sweep's modules, whose passes look at whole tables: the module's one database as a clone of its
    own would be (bot, ana, eve and boss as in ``stack``), and this process's settings read afresh (as
    ``use_database`` does); put back as it was after the test."""
    reset_settings()
    yield sweep_module_db
    drain_projections()  # a run this test ended is projected on a thread a moment later: not after the put-back
    put_back_rows()


@pytest.fixture
def slow_reenqueue(monkeypatch: pytest.MonkeyPatch) -> float:
    """A re-enqueue delay longer than a test's passes take (the suite's 1 s would let a row republished by
    the first pass fall due again by the last): returns it. ``pass_time`` past it makes rows stale."""
    monkeypatch.setenv("PARKWAY_REENQUEUE_AFTER_S", "60")
    reset_settings()
    return 60.0
