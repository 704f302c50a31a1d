"""``GET /v1/workers`` (admins): the live workers, the ``name@version`` keys each runs and its last heartbeat;
a worker whose heartbeat ran out is not listed (issue 30, item 4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi.testclient import TestClient

from models import store
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, drive
from tests.integration.helpers import advertise
from tests.support import pass_time, start, wait_parked


def fleet(client: TestClient, actors: Actors) -> dict[str, Any]:
    response = client.get("/v1/workers", headers=actors.auth(ADMIN))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["next"] is None
    return body


def listed(client: TestClient, actors: Actors) -> dict[str, dict[str, Any]]:
    return {str(item["node"]): item for item in fleet(client, actors)["items"]}


def run(client: TestClient, actors: Actors, run_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def versions(client: TestClient, actors: Actors) -> dict[str, dict[str, Any]]:
    return {str(v["version"]): v for v in fleet(client, actors)["versions"]}


def test_workers__admin_sees_each_live_worker_with_its_keys_and_a_dead_one_is_gone(
    client: TestClient, actors: Actors
) -> None:
    # Given a worker that runs a step and a continuation version, and one whose heartbeat will run out first
    advertise("old@host", continuations=("t.one_done@1",), steps=("t.ask_one",), ttl_s=5)
    advertise("new@host", continuations=("t.one_done@2", "t.finish@1"), steps=("t.ask_one",), ttl_s=60)

    # Then an admin sees both, with their keys and heartbeats
    workers = listed(client, actors)
    assert set(workers) == {"old@host", "new@host"}
    new = workers["new@host"]
    assert (new["steps"], new["continuations"]) == (["t.ask_one"], ["t.finish@1", "t.one_done@2"])
    assert new["pid"] == 0
    assert datetime.fromisoformat(str(new["started_at"])) <= datetime.fromisoformat(str(new["heartbeat_at"]))

    # When the first one's heartbeat runs out
    pass_time(10)

    # Then only the live one is listed
    assert set(listed(client, actors)) == {"new@host"}


def test_workers__only_admins__403_for_others_401_without_a_token(client: TestClient, actors: Actors) -> None:
    for name in (HUMAN, AGENT):
        refused = client.get("/v1/workers", headers=actors.auth(name))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "forbidden"
    anonymous = client.get("/v1/workers")
    assert anonymous.status_code == 401, anonymous.text


def test_workers__list_the_versions_work_still_needs_until_it_drains(client: TestClient, actors: Actors) -> None:
    # Given a run parked on t.one_done@1, which no live worker runs: the run says so too
    run_id = start("t.ask_one")
    drive(run_id)
    [interaction] = wait_parked(run_id, sweep=False).values()
    assert versions(client, actors)["t.one_done@1"] == {
        "version": "t.one_done@1", "parked": 1, "due": 0, "served": False,
    }  # fmt: skip
    assert run(client, actors, run_id)["unserved"] == ["t.one_done@1"]

    # When a worker that runs it comes back, and the wait is answered: its continuation is due, not yet run
    worker = advertise("back@host", continuations=("t.one_done@1",))
    try:
        assert versions(client, actors)["t.one_done@1"]["served"] is True
        assert run(client, actors, run_id)["unserved"] == []
        answered = client.post(
            f"/v1/interactions/{interaction.id}/answer", json={"response_id": "w-1", "value": "yes"},
            headers=actors.auth(HUMAN),
        )  # fmt: skip
        assert answered.status_code == 200, answered.text
        assert versions(client, actors)["t.one_done@1"] == {
            "version": "t.one_done@1", "parked": 0, "due": 1, "served": True,
        }  # fmt: skip

        # Then once it has run, nothing needs the version any more: it is safe to retire
        drive(run_id)
        assert "t.one_done@1" not in versions(client, actors)
    finally:
        with transaction() as session:
            store.withdraw(session, worker)
