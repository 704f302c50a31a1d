"""``GET /v1/workers`` (admins): the live workers, each one's kind, the ``name@version`` keys it runs, since when
and its last heartbeat; a worker whose heartbeat ran out is not listed (issue 30, item 4); and each version
work still needs, with the grace left of one no live worker runs (issue 41, item 7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

import tests.release_a
from models import store
from parkway.children import OUTBOUND_QUEUES
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, drive
from tests.integration.helpers import advertise
from tests.support import Stack, pass_time, run_status, start, wait_for, wait_parked, wait_status

assert tests.release_a  # its steps run in this process (``drive``): no worker of this module runs release A


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
    # Given a run parked on t.one_done@1, which no live worker runs: the run says so too (its grace is over: the
    # first test's worker last advertised it over PARKWAY_VERSION_GRACE_S ago, while the fleet was up)
    run_id = start("t.ask_one")
    drive(run_id)
    [interaction] = wait_parked(run_id, sweep=False).values()
    assert versions(client, actors)["t.one_done@1"] == {
        "version": "t.one_done@1", "parked": 1, "due": 0, "served": False, "grace_left_s": 0.0,
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
            "version": "t.one_done@1", "parked": 0, "due": 1, "served": True, "grace_left_s": None,
        }  # fmt: skip

        # Then once it has run, nothing needs the version any more: it is safe to retire
        drive(run_id)
        assert "t.one_done@1" not in versions(client, actors)
    finally:
        with transaction() as session:
            store.withdraw(session, worker)


def fleet_up_longer(seconds: float) -> None:
    """As though every fleet present had come back, and every key and wait been seen, ``seconds`` earlier;
    the workers' own heartbeats (and so their presence) untouched."""
    back = {"s": seconds}
    with transaction() as session:
        for table, column in (("fleet_presence", "up_since"), ("advertised_versions", "last_seen_at"),
                              ("interactions", "created_at")):  # fmt: skip
            session.execute(text(f"UPDATE {table} SET {column} = {column} - make_interval(secs => :s)"), back)


def test_workers__show_each_kind_since_when_and_each_unserved_version_its_waits_and_grace_left(
    stack: Stack, client: TestClient, actors: Actors
) -> None:
    # Given no worker from before; a real Celery worker of release B, the outbound worker (their own sweeps
    # on a grace longer than this test), a remote worker's lease call and a registered push handler
    pass_time(3600)
    slow = {"PARKWAY_VERSION_GRACE_S": "600"}
    celery = stack.start_worker(PARKWAY_IMPORTS="tests.release_b", **slow)
    outbound = stack.start_worker(queues=OUTBOUND_QUEUES, **slow)
    try:
        body = {"worker": "agent-ops-1", "serves": ["w.remote@1"], "max": 0, "wait_s": 0}
        assert client.post("/v1/worker/lease", json=body, headers=actors.auth(ADMIN)).status_code == 200
        pushed = client.post("/v1/handlers", json={"url": "http://127.0.0.1:9/push", "serves": ["w.pushed"]},
                             headers=actors.auth(ADMIN))  # fmt: skip
        assert pushed.status_code == 201, pushed.text
        push = f"push:{pushed.json()['id']}"

        # Then an admin sees each worker's kind and what it serves, since when; the outbound one not at all
        workers = listed(client, actors)
        [node] = [n for n in workers if n.startswith(f"{celery.name}@")]
        assert {n: w["kind"] for n, w in workers.items()} == {node: "celery", "agent-ops-1": "remote", push: "push"}
        assert "b.ask" in workers[node]["steps"] and "a.done@1" not in workers[node]["continuations"]
        assert (workers["agent-ops-1"]["continuations"], workers[push]["steps"]) == (["w.remote@1"], ["w.pushed"])
        assert all(w["started_at"] <= w["heartbeat_at"] for w in workers.values())

        # When a run of release A (which no live worker runs) parks on a.done@1
        # (driven here until it parks: release B's worker may hold its start for a moment to hand it on)
        run_id = start("a.ask")
        wait_for(lambda: drive(run_id) or run_status(run_id) == "waiting", what=f"run {run_id} parked")

        # Then the version is listed with its wait and the grace left (PARKWAY_VERSION_GRACE_S 5 here)
        version = versions(client, actors)["a.done@1"]
        assert (version["parked"], version["due"], version["served"]) == (1, 0, False)
        assert 0 <= version["grace_left_s"] <= 5

        # And once the grace has run out while the fleet was up, it says 0 left, and the sweep agrees
        fleet_up_longer(10)
        assert versions(client, actors)["a.done@1"]["grace_left_s"] == 0
        assert "continuation version a.done@1" in (wait_status(run_id, "interrupted", timeout=20).reason or "")
    finally:
        celery.terminate()
        outbound.terminate()
