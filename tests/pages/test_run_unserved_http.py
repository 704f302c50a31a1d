"""A run's page says when no live worker runs the version its wait resumes (issue 30, item 4): in-process,
the fleet's advertisements written as a worker's heartbeat writes them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from models import store
from parkway.db import transaction
from tests.api.conftest import ADMIN, Actors, drive
from tests.integration.helpers import advertise
from tests.pages.test_history_http import sign_in, text_of
from tests.support import start, wait_parked

UNSERVED = "no live worker runs t.one_done@1"


def test_run_page__says_no_live_worker_runs_the_version_a_wait_resumes_until_one_does(
    client: TestClient, actors: Actors
) -> None:
    # Given a run parked on t.one_done@1 and no live worker that runs it
    run_id = start("t.ask_one")
    drive(run_id)
    wait_parked(run_id, sweep=False)
    sign_in(client, actors.tokens[ADMIN])

    # Then its page and the fragment the live page swaps in say so
    assert UNSERVED in text_of(client.get(f"/runs/{run_id}").text)
    assert UNSERVED in text_of(client.get(f"/runs/{run_id}/parts").text)

    # When a live worker advertises it, they no longer do
    worker = advertise("pages@host", continuations=("t.one_done@1",))
    try:
        assert "no live worker" not in text_of(client.get(f"/runs/{run_id}").text)
        assert "no live worker" not in text_of(client.get(f"/runs/{run_id}/parts").text)
    finally:
        with transaction() as session:
            store.withdraw(session, worker)
