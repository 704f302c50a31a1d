"""Over HTTP: a wait the sweep found can no longer make progress answers 410 with the run's status, never a
200 whose answer a worker would then throw away (sweep category 3)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from beat.sweep import run_sweep
from tasks import registry
from tests.api.conftest import ADMIN, HUMAN, Actors, drive
from tests.support import TARGET, interactions


def _agent(client: TestClient, actors: Actors, name: str) -> tuple[dict[str, str], str]:
    """A new agent granted on TARGET: its auth header and its grant's id."""
    admin = actors.auth(ADMIN)
    made = client.post("/v1/principals", json={"kind": "agent", "name": name}, headers=admin)
    assert made.status_code == 201, made.text
    grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin)
    assert grant.status_code == 201, grant.text
    return {"Authorization": f"Bearer {made.json()['token']}"}, grant.json()["id"]


def _parked(client: TestClient, auth: dict[str, str]) -> tuple[str, str]:
    made = client.post("/v1/runs", json={"workflow": "t.ask_one", "payload": {}, "target": TARGET}, headers=auth)
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    drive(run_id)
    return run_id, interactions(run_id)["go"].id


def _answer_is_gone(client: TestClient, actors: Actors, run_id: str, iid: str, reason: str) -> None:
    answered = client.post(
        f"/v1/interactions/{iid}/answer", json={"response_id": "late", "value": "yes"}, headers=actors.auth(HUMAN)
    )
    assert answered.status_code == 410, answered.text
    body = answered.json()
    assert body["error"] == "gone"
    assert (body["state"]["status"], body["state"]["run_status"]) == ("interrupted", "interrupted")
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert (run["status"], run["reason"], run["interactions"]) == ("interrupted", reason, [])


def test_answer_after_the_owner_lost_its_grant_and_a_sweep__410_with_run_status(
    client: TestClient, actors: Actors
) -> None:
    # Given a run parked for an agent whose grant an admin then revokes
    auth, grant_id = _agent(client, actors, "fc-revoked")
    run_id, iid = _parked(client, auth)
    assert client.delete(f"/v1/grants/{grant_id}", headers=actors.auth(ADMIN)).status_code == 204

    # When the sweep passes
    run_sweep()

    # Then the question is gone: 410, with the run's status
    _answer_is_gone(client, actors, run_id, iid, "authority revoked")


def test_answer_after_its_continuation_version_was_unregistered_and_a_sweep__410_with_run_status(
    client: TestClient, actors: Actors, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run parked on t.one_done@1, a version a deploy then dropped
    auth, _ = _agent(client, actors, "fc-unregistered")
    run_id, iid = _parked(client, auth)
    monkeypatch.delitem(registry._continuations, "t.one_done@1")

    # When the sweep passes
    run_sweep()

    # Then the question is gone: 410, with the run's status
    _answer_is_gone(client, actors, run_id, iid, "continuation version t.one_done@1 is not registered")
