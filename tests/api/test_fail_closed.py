"""Over HTTP: a wait the sweep found can no longer make progress answers 410 with the run's status, never a
200 whose answer a worker would then throw away (sweep category 3)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from beat.sweep import run_sweep
from parkway.settings import get_settings
from tests.api.conftest import ADMIN, HUMAN, Actors, drive
from tests.integration.helpers import advertise
from tests.support import TARGET, interactions, pass_time


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


def test_answer_after_no_live_worker_ran_its_version_for_the_grace_and_a_sweep__410_with_run_status(
    client: TestClient, actors: Actors
) -> None:
    # Given a run parked on t.one_done@1, a version a deploy then dropped: its last worker is gone for longer
    # than the grace, and the live worker does not run it
    auth, _ = _agent(client, actors, "fc-unregistered")
    old = advertise("old@host", continuations=("t.one_done@1",), ttl_s=1)
    run_id, iid = _parked(client, auth)
    grace = get_settings().version_grace_s
    advertise("new@host", continuations=("t.finish@1",), ttl_s=3 * grace)  # the fleet up all the while
    pass_time(grace + 1)

    # When the sweep passes
    run_sweep()

    # Then the question is gone: 410, with the run's status
    reason = interactions(run_id)["go"].reason or ""
    assert reason.startswith("continuation version t.one_done@1: no live worker has advertised it since"), old
    _answer_is_gone(client, actors, run_id, iid, reason)
