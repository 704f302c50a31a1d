"""Runs (start, Idempotency-Key, the durable read), event paging, interaction listing with cursors."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT, AGENT2, HUMAN, Actors, drive
from tests.api.test_access import UNSTORABLE_POSITIONS, UNSTORABLE_TEXTS
from tests.support import TARGET, wait_for

RUN_FIELDS = {
    "id", "workflow", "status", "owner", "target", "created_at", "completed_at", "result", "error", "reason",
    "interactions", "tool_calls", "reviews", "steps",
}  # fmt: skip
INTERACTION_FIELDS = {
    "id", "run_id", "step_id", "key", "kind", "prompt", "schema", "action", "resources", "target", "status",
    "expires_at", "answered_by", "answered_at", "value",
}  # fmt: skip


def start(client: TestClient, actors: Actors, workflow: str = "t.ask_two", **kwargs: object) -> str:
    headers = {**actors.auth(str(kwargs.pop("who", AGENT))), **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    body = {"workflow": workflow, "payload": kwargs.pop("payload", {}), "target": TARGET}
    made = client.post("/v1/runs", json=body, headers=headers)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_start_and_read__the_run_has_every_contract_field(client: TestClient, actors: Actors) -> None:
    body = {"workflow": "t.ask_two", "payload": {"service": "billing"}, "target": TARGET}
    made = client.post("/v1/runs", json=body, headers=actors.auth(AGENT))
    assert made.status_code == 201
    assert made.json()["status"] == "running" and made.json()["owner"] == AGENT
    run_id = made.json()["id"]
    drive(run_id)
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert set(run) >= RUN_FIELDS
    assert run["status"] == "waiting" and run["workflow"] == "t.ask_two" and run["target"] == TARGET
    assert run["completed_at"] is None and run["tool_calls"] == [] and run["reviews"] == []
    assert {i["key"] for i in run["interactions"]} == {"window", "reason"}
    assert all(set(i) >= INTERACTION_FIELDS for i in run["interactions"])
    assert [(s["seq"], s["name"], s["status"]) for s in run["steps"]] == [(1, "t.ask_two", "parked")]
    assert run["created_at"].endswith("Z")


def test_unknown_workflow__422_and_nothing_stored(client: TestClient, actors: Actors) -> None:
    body = {"workflow": "t.nowhere", "payload": {}, "target": TARGET}
    refused = client.post("/v1/runs", json=body, headers=actors.auth(AGENT))
    assert refused.status_code == 422
    assert refused.json()["error"] == "unknown_workflow" and "t.nowhere" in refused.json()["detail"]


def test_idempotency_key__same_body_same_run_other_body_409_keys_are_per_agent(
    client: TestClient, actors: Actors
) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = start(client, actors, headers=key, payload={"service": "a"})
    assert start(client, actors, headers=key, payload={"service": "a"}) == first
    other = client.post(
        "/v1/runs",
        json={"workflow": "t.ask_two", "payload": {"service": "b"}, "target": TARGET},
        headers={**actors.auth(AGENT), **key},
    )
    assert other.status_code == 409
    assert other.json()["error"] == "conflict" and other.json()["state"]["run_id"] == first
    # Another agent's key space is its own; no key means a new run each time
    assert start(client, actors, who=AGENT2, headers=key, payload={"service": "a"}) != first
    assert start(client, actors, payload={"service": "a"}) != start(client, actors, payload={"service": "a"})
    too_long = client.post(
        "/v1/runs",
        json={"workflow": "t.ask_two", "payload": {}, "target": TARGET},
        headers={**actors.auth(AGENT), "Idempotency-Key": "k" * 201},
    )
    assert too_long.status_code == 422


def test_run_events__after_n_and_cursor_paging(client: TestClient, actors: Actors) -> None:
    run_id = start(client, actors)
    drive(run_id)
    auth = actors.auth(HUMAN)

    def delivered() -> dict[str, Any] | None:
        # Events are delivered once no older transaction of the server is open (the log's bound): on a busy
        # server they arrive a moment after the run's own commit. The park's events come last, all at once.
        page: dict[str, Any] = client.get(f"/v1/runs/{run_id}/events", headers=auth).json()
        return page if "step.parked" in {e["type"] for e in page["items"]} else None

    everything = wait_for(delivered, timeout=30, what=f"the events of run {run_id}")
    assert everything["next"] is None
    seqs = [e["seq"] for e in everything["items"]]
    assert seqs == sorted(set(seqs)) and len(seqs) >= 5
    assert [e["type"] for e in everything["items"]][:2] == ["run.created", "continuation.ready"]
    assert all(e["run_id"] == run_id and e["at"].endswith("Z") for e in everything["items"])

    # after=N means seq > N. Each read may again be held back a moment by a transaction of another test's
    # database that ended while it read (counted as open: docs/api.md), so each is waited for, never skipped.
    def after_second() -> list[int] | None:
        after = client.get(f"/v1/runs/{run_id}/events", params={"after": seqs[1]}, headers=auth).json()
        got = [e["seq"] for e in after["items"]]
        assert got == seqs[2 : 2 + len(got)], got  # late, never out of order or missing in between
        return got if got == seqs[2:] else None

    wait_for(after_second, timeout=30, what="the events after the second")

    # Paging two at a time by `next` gives the same events, in order
    def paged() -> list[int] | None:
        seen: list[int] = []
        params: dict[str, object] = {"limit": 2}
        while True:
            page = client.get(f"/v1/runs/{run_id}/events", params=params, headers=auth).json()
            seen += [e["seq"] for e in page["items"]]
            if page["next"] is None:
                break
            params = {"limit": 2, "cursor": page["next"]}
        assert seen == seqs[: len(seen)], seen
        return seen if seen == seqs else None

    wait_for(paged, timeout=30, what="the events paged two at a time")
    assert client.get(f"/v1/runs/{run_id}/events", params={"cursor": "x"}, headers=auth).status_code == 422
    assert client.get(f"/v1/runs/{run_id}/events", params={"after": -1}, headers=auth).status_code == 422


def test_interactions__filters_and_cursor_paging(client: TestClient, actors: Actors) -> None:
    runs = [start(client, actors) for _ in range(3)]
    for run_id in runs:
        drive(run_id)
    auth = actors.auth(HUMAN)
    seen: list[str] = []
    params: dict[str, object] = {"limit": 2, "status": "pending", "target": TARGET}
    pages = 0
    while True:
        page = client.get("/v1/interactions", params=params, headers=auth)
        assert page.status_code == 200, page.text
        seen += [i["id"] for i in page.json()["items"]]
        assert all(i["status"] == "pending" for i in page.json()["items"])
        pages += 1
        if page.json()["next"] is None:
            break
        params = {**params, "cursor": page.json()["next"]}
    assert len(seen) == len(set(seen)) and pages >= 3
    mine = set(seen)
    for run_id in runs:
        listed = client.get("/v1/interactions", params={"run_id": run_id}, headers=auth).json()["items"]
        assert len(listed) == 2 and {i["id"] for i in listed} <= mine
    assert client.get("/v1/interactions", params={"target": "team:nobody"}, headers=auth).json()["items"] == []
    assert client.get("/v1/interactions", params={"status": "weird"}, headers=auth).status_code == 422
    bad = client.get("/v1/interactions", params={"cursor": "not-a-cursor"}, headers=auth)
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_cursor"


@pytest.mark.parametrize("cursor", [*UNSTORABLE_POSITIONS, "bm90IGpzb24"])
def test_lists__a_cursor_carrying_text_no_row_can_hold__422_invalid_cursor(
    client: TestClient, actors: Actors, cursor: str
) -> None:
    bad = client.get("/v1/interactions", params={"cursor": cursor}, headers=actors.auth(HUMAN))
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_cursor", bad.text


@pytest.mark.parametrize("cursor", UNSTORABLE_TEXTS)
def test_principals_list__a_cursor_carrying_text_no_name_can_hold__422_invalid_cursor(
    client: TestClient, actors: Actors, cursor: str
) -> None:
    bad = client.get("/v1/principals", params={"cursor": cursor}, headers=actors.auth(ADMIN))
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_cursor", bad.text
