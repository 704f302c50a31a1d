"""GET /v1/runs: the runs the caller may read, newest first, paged, filtered by status, workflow and target
(SPEC §4), read through the runs' index ranges (models/paging.py)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT, AGENT2, HUMAN, STRANGER, Actors, drive
from tests.support import TARGET

OTHER = "team:elsewhere"


def _start(client: TestClient, actors: Actors, who: str, workflow: str, target: str = TARGET) -> str:
    made = client.post("/v1/runs", json={"workflow": workflow, "payload": {}, "target": target},
                       headers=actors.auth(who))  # fmt: skip
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _all(client: TestClient, actors: Actors, who: str, **query: Any) -> list[dict[str, Any]]:
    """Every page of the list, two at a time, following ``next``."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {**query, "limit": 2}
    while True:
        page = client.get("/v1/runs", params=params, headers=actors.auth(who))
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["items"]
        if body["next"] is None:
            return items
        params["cursor"] = body["next"]


def test_list_runs__what_each_caller_may_read_newest_first_filtered_and_paged(
    client: TestClient, actors: Actors
) -> None:
    # Given runs on the target ana and bot are granted on, two of them waiting, and one on a target only
    # bot2 is granted on
    admin = actors.auth(ADMIN)
    grant = client.post("/v1/grants", json={"principal": AGENT2, "target": OTHER}, headers=admin)
    assert grant.status_code == 201, grant.text
    ours = [_start(client, actors, AGENT, "t.ask_one") for _ in range(3)] + [_start(client, actors, AGENT, "t.after")]
    for run_id in ours[:2]:
        drive(run_id)
    elsewhere = _start(client, actors, AGENT2, "t.ask_one", target=OTHER)

    # When ana lists them, and an admin
    seen = _all(client, actors, HUMAN)
    everything = [r["id"] for r in _all(client, actors, ADMIN)]

    # Then ana reads exactly the runs on her target, newest first, each once across the pages
    assert [r["id"] for r in seen] == list(reversed(ours))
    assert {r["target"] for r in seen} == {TARGET} and seen[0]["owner"] == AGENT
    assert everything[0] == elsewhere and set(ours) < set(everything)
    # And the filters narrow it, a target she may not read to nothing
    waiting = _all(client, actors, HUMAN, status="waiting")
    assert [r["id"] for r in waiting] == list(reversed(ours[:2])) and {r["pending"] for r in waiting} == {1}
    assert [r["id"] for r in _all(client, actors, HUMAN, workflow="t.after")] == [ours[3]]
    assert [r["id"] for r in _all(client, actors, HUMAN, target=TARGET)] == list(reversed(ours))
    assert _all(client, actors, HUMAN, target=OTHER) == []
    assert [r["id"] for r in _all(client, actors, ADMIN, target=OTHER)] == [elsewhere]
    assert _all(client, actors, STRANGER) == []


def test_list_runs__refuses_a_bad_query_and_no_token(client: TestClient, actors: Actors) -> None:
    assert client.get("/v1/runs").status_code == 401
    for params in ({"status": "success"}, {"cursor": "bm90LWEtY3Vyc29y"}, {"limit": 0}):
        refused = client.get("/v1/runs", params=params, headers=actors.auth(HUMAN))
        assert refused.status_code == 422, (params, refused.text)
