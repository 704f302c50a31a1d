"""Who may do what over HTTP: 401 without a valid token, 403 for the wrong kind or no live grant."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from models.tables import Interaction, Run
from parkway.db import transaction
from parkway.errors import Conflict, Forbidden, WrongKind
from tasks import sdk
from tests.api.conftest import ADMIN, AGENT, AGENT2, HUMAN, STRANGER, Actors, drive
from tests.support import TARGET, effects, interactions


@pytest.fixture(scope="module")
def parked(client: TestClient, actors: Actors) -> dict[str, Any]:
    """A run of AGENT parked on two questions for team:ops."""
    made = client.post(
        "/v1/runs",
        json={"workflow": "t.ask_two", "payload": {}, "target": TARGET},
        headers=actors.auth(AGENT),
    )
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    drive(run_id)
    asked = interactions(run_id)
    return {"run_id": run_id, "window": asked["window"].id, "reason": asked["reason"].id}


def routes(parked: dict[str, Any]) -> list[tuple[str, str, Any]]:
    run_id, iid = parked["run_id"], parked["window"]
    return [
        ("POST", "/v1/runs", {"workflow": "t.ask_one", "payload": {}, "target": TARGET}),
        ("GET", f"/v1/runs/{run_id}", None),
        ("GET", f"/v1/runs/{run_id}/events", None),
        ("GET", "/v1/events/stream", None),
        ("GET", "/v1/interactions", None),
        ("GET", f"/v1/interactions/{iid}", None),
        ("POST", f"/v1/interactions/{iid}/answer", {"response_id": "r", "value": "now"}),
        ("POST", f"/v1/interactions/{iid}/cancel", {"response_id": "r"}),
        ("POST", "/v1/principals", {"kind": "human", "name": "someone"}),
        ("GET", "/v1/principals", None),
        ("DELETE", "/v1/principals/whoever", None),
        ("POST", "/v1/principals/whoever/token", None),
        ("POST", "/v1/grants", {"principal": HUMAN, "target": TARGET}),
        ("DELETE", "/v1/grants/whatever", None),
    ]


def call(client: TestClient, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    return client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer pk_not-a-token"}, {"Authorization": "Basic eDp5"}])
def test_every_v1_route__without_a_valid_token_is_401_json(
    client: TestClient, parked: dict[str, Any], headers: dict[str, str]
) -> None:
    for method, path, body in routes(parked):
        response = call(client, method, path, body, headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"] == "unauthorized"
        assert response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"
    # Nothing happened: the question is still pending
    assert interactions(parked["run_id"])["window"].status == "pending"


def test_invalid_body_without_a_token__is_401_not_422(client: TestClient) -> None:
    response = client.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 401


def test_token_of_a_principal_made_by_the_store_without_token__never_matches(client: TestClient) -> None:
    # The suite's stack principals have token_hash NULL: no bearer value can authenticate as them.
    response = client.get("/v1/interactions", headers={"Authorization": "Bearer "})
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("who", "method", "path", "body"),
    [
        (HUMAN, "POST", "/v1/runs", {"workflow": "t.ask_one", "payload": {}, "target": TARGET}),
        (ADMIN, "POST", "/v1/runs", {"workflow": "t.ask_one", "payload": {}, "target": TARGET}),
        (AGENT, "POST", "/v1/principals", {"kind": "admin", "name": "sneaky"}),
        (HUMAN, "POST", "/v1/principals", {"kind": "admin", "name": "sneaky"}),
        (HUMAN, "POST", "/v1/grants", {"principal": STRANGER, "target": TARGET}),
        (AGENT, "POST", "/v1/grants", {"principal": AGENT, "target": "team:finance"}),
        (HUMAN, "DELETE", "/v1/grants/anything", None),
        (HUMAN, "GET", "/v1/principals", None),
        (AGENT, "DELETE", "/v1/principals/anyone", None),
        (HUMAN, "POST", "/v1/principals/anyone/token", None),
    ],
)
def test_wrong_kind__is_403(client: TestClient, actors: Actors, who: str, method: str, path: str, body: Any) -> None:
    response = call(client, method, path, body, actors.auth(who))
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "forbidden"
    assert "state" not in response.json()


def test_agent_cannot_answer__people_answer(client: TestClient, actors: Actors, parked: dict[str, Any]) -> None:
    response = client.post(
        f"/v1/interactions/{parked['window']}/answer",
        json={"response_id": "agent", "value": "now"},
        headers=actors.auth(AGENT),
    )
    assert response.status_code == 403
    assert interactions(parked["run_id"])["window"].status == "pending"


@pytest.mark.parametrize(
    ("who", "status"), [(None, 401), (AGENT, 403), (HUMAN, 404)], ids=["bad-token", "agent", "human"]
)
def test_answer_of_an_unknown_interaction__who_asks_is_told_first(
    client: TestClient, actors: Actors, who: str | None, status: int
) -> None:
    # The answer reads its caller in the statement that reads the interaction; the order of refusals holds.
    headers = actors.auth(who) if who else {"Authorization": "Bearer pk_not-a-token"}
    response = client.post(
        f"/v1/interactions/{'0' * 32}/answer", json={"response_id": "r", "value": 1}, headers=headers
    )
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    if status == 403:
        assert response.json()["detail"] == f"this needs a principal of kind human or admin; you are agent {AGENT}"


def test_agent_answering_with_a_body_that_is_no_answer__is_422(client: TestClient, actors: Actors) -> None:
    # The answer's kind check happens in its statement, after FastAPI checked the body (docs/api.md).
    response = client.post(f"/v1/interactions/{'0' * 32}/answer", json={"value": 1}, headers=actors.auth(AGENT))
    assert response.status_code == 422, response.text


def assert_denied(client: TestClient, actors: Actors, who: str, parked: dict[str, Any]) -> None:
    """``who`` can neither list, read, answer nor cancel the parked run's questions, nor read the run."""
    auth = actors.auth(who)
    listed = client.get("/v1/interactions", headers=auth)
    assert listed.status_code == 200
    assert parked["run_id"] not in {i["run_id"] for i in listed.json()["items"]}
    for path in (
        f"/v1/interactions/{parked['window']}",
        f"/v1/runs/{parked['run_id']}",
        f"/v1/runs/{parked['run_id']}/events",
    ):
        read = client.get(path, headers=auth)
        assert read.status_code == 403, (path, read.text)
        assert "state" not in read.json()
        assert "t.ask_two" not in read.text and "When?" not in read.text  # nothing of the resource leaks
    answered = client.post(
        f"/v1/interactions/{parked['window']}/answer", json={"response_id": "x", "value": "now"}, headers=auth
    )
    assert answered.status_code == 403
    assert "state" not in answered.json()
    canceled = client.post(f"/v1/interactions/{parked['window']}/cancel", json={"response_id": "y"}, headers=auth)
    assert canceled.status_code == 403
    asked = interactions(parked["run_id"])
    assert asked["window"].status == "pending" and asked["reason"].status == "pending"


def test_human_without_a_grant__cannot_list_read_answer_or_cancel(
    client: TestClient, actors: Actors, parked: dict[str, Any]
) -> None:
    assert_denied(client, actors, STRANGER, parked)


def test_revoked_grant__denies_at_once(client: TestClient, actors: Actors, parked: dict[str, Any]) -> None:
    # Given a new human granted on team:ops, who can see the question
    admin = actors.auth(ADMIN)
    name = f"temp-{uuid.uuid4().hex[:6]}"
    actors.tokens[name] = client.post("/v1/principals", json={"kind": "human", "name": name}, headers=admin).json()[
        "token"
    ]
    grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin).json()
    assert grant["principal"] == name and grant["target"] == TARGET
    assert client.get(f"/v1/interactions/{parked['window']}", headers=actors.auth(name)).status_code == 200
    listed = client.get("/v1/interactions", params={"run_id": parked["run_id"]}, headers=actors.auth(name))
    assert len(listed.json()["items"]) == 2
    # When the grant is revoked
    assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204
    # Then the very next requests are denied
    assert_denied(client, actors, name, parked)
    # And revoking again is a no-op; an unknown grant is 404
    assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204
    assert client.delete("/v1/grants/nope", headers=admin).status_code == 404


def test_unknown_ids__are_404_for_anyone(client: TestClient, actors: Actors) -> None:
    for who in (HUMAN, STRANGER, ADMIN):
        for path in ("/v1/runs/nope", "/v1/runs/nope/events", "/v1/interactions/nope"):
            response = client.get(path, headers=actors.auth(who))
            assert response.status_code == 404, (who, path)
            assert response.json()["error"] == "not_found"
        answered = client.post(
            "/v1/interactions/nope/answer", json={"response_id": "x", "value": 1}, headers=actors.auth(HUMAN)
        )
        assert answered.status_code == 404


def run_count() -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def test_body_naming_an_owner__is_refused_and_never_makes_an_owner(client: TestClient, actors: Actors) -> None:
    before = run_count()
    for field in ("owner", "owner_id", "principal"):
        body = {"workflow": "t.ask_one", "payload": {}, "target": TARGET, field: HUMAN}
        response = client.post("/v1/runs", json=body, headers=actors.auth(AGENT))
        assert response.status_code == 422, response.text
        assert field in response.json()["detail"]
    assert run_count() == before
    # The owner is always the authenticated agent, also when the payload talks about owners
    body = {"workflow": "t.ask_one", "payload": {"owner": HUMAN}, "target": TARGET}
    made = client.post("/v1/runs", json=body, headers=actors.auth(AGENT2))
    assert made.status_code == 201
    assert made.json()["owner"] == AGENT2
    assert client.get(f"/v1/runs/{made.json()['id']}", headers=actors.auth(HUMAN)).json()["owner"] == AGENT2


def test_agent_without_a_grant_on_the_target__cannot_start_a_run(client: TestClient, actors: Actors) -> None:
    before = run_count()
    body = {"workflow": "t.ask_one", "payload": {}, "target": "team:finance"}
    response = client.post("/v1/runs", json=body, headers=actors.auth(AGENT))
    assert response.status_code == 403
    assert run_count() == before


def test_admin_sees_everything_and_agents_list_their_own_runs(
    client: TestClient, actors: Actors, parked: dict[str, Any]
) -> None:
    admin = client.get("/v1/interactions", params={"run_id": parked["run_id"]}, headers=actors.auth(ADMIN))
    assert len(admin.json()["items"]) == 2
    assert client.get(f"/v1/runs/{parked['run_id']}", headers=actors.auth(ADMIN)).status_code == 200
    own = client.get("/v1/interactions", params={"run_id": parked["run_id"]}, headers=actors.auth(AGENT))
    assert len(own.json()["items"]) == 2
    other = client.get("/v1/interactions", params={"run_id": parked["run_id"]}, headers=actors.auth(AGENT2))
    assert other.json()["items"] == []


def test_owner_losing_its_grant_while_parked__run_fails_closed(
    client: TestClient, actors: Actors, tmp_path: Path
) -> None:
    # Given an agent of its own whose run is parked on a continuation whose body leaves a mark when it runs
    # (t.slow_done touches <flag>.running first; the flag already there, it does not wait)
    flag = tmp_path / "go"
    flag.touch()
    ran = Path(f"{flag}.running")
    admin = actors.auth(ADMIN)
    name = f"agent-{uuid.uuid4().hex[:6]}"
    token = client.post("/v1/principals", json={"kind": "agent", "name": name}, headers=admin).json()["token"]
    grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin).json()
    payload = {"continuation": "t.slow_done@1", "flag": str(flag)}
    body = {"workflow": "t.ask_one", "payload": payload, "target": TARGET}
    run_id = client.post("/v1/runs", json=body, headers={"Authorization": f"Bearer {token}"}).json()["id"]
    drive(run_id)
    iid = interactions(run_id)["go"].id
    # When the owner's grant is revoked and then a person answers
    assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204
    answered = client.post(
        f"/v1/interactions/{iid}/answer",
        json={"response_id": "r1", "value": "go"},
        headers=actors.auth(HUMAN),
    )
    assert answered.status_code == 200
    drive(run_id)
    # Then its body never ran, and the run fails closed
    assert not ran.exists()
    assert effects(run_id) == 0
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert (run["status"], run["reason"]) == ("interrupted", "authority revoked")
    # And the agent itself can no longer read its run
    assert client.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"}).status_code == 403


# --------------------------------------------------------------------------- who may answer and cancel


def park(client: TestClient, actors: Actors, *, owner: str = AGENT, workflow: str = "t.ask_one", **payload: Any) -> str:
    """A run of ``owner`` on team:ops parked on its question(s); the first question's id."""
    body = {"workflow": workflow, "payload": payload, "target": TARGET}
    made = client.post("/v1/runs", json=body, headers=actors.auth(owner))
    assert made.status_code == 201, made.text
    drive(made.json()["id"])
    asked = interactions(made.json()["id"])
    return next(iter(asked.values())).id


def answer_as(client: TestClient, actors: Actors, who: str, iid: str, value: Any = "go") -> Any:
    return client.post(
        f"/v1/interactions/{iid}/answer",
        json={"response_id": uuid.uuid4().hex, "value": value},
        headers=actors.auth(who),
    )


def cancel_as(client: TestClient, actors: Actors, who: str, iid: str, **body: Any) -> Any:
    body.setdefault("response_id", uuid.uuid4().hex)
    return client.post(f"/v1/interactions/{iid}/cancel", json=body, headers=actors.auth(who))


def status_of(iid: str) -> str:
    with transaction() as session:
        return str(session.scalar(select(Interaction.status).where(Interaction.id == iid)))


def test_admin_without_a_grant__cannot_answer_or_cancel_but_reads(client: TestClient, actors: Actors) -> None:
    iid = park(client, actors)
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).status_code == 200
    answered = answer_as(client, actors, ADMIN, iid)
    assert answered.status_code == 403, answered.text
    assert "state" not in answered.json()
    canceled = cancel_as(client, actors, ADMIN, iid)
    assert canceled.status_code == 403, canceled.text
    assert status_of(iid) == "pending"


@pytest.mark.parametrize("act", ["answer", "cancel"])
def test_admin_with_a_grant__answers_and_cancels(client: TestClient, actors: Actors, act: str) -> None:
    admin = actors.auth(ADMIN)
    grant = client.post("/v1/grants", json={"principal": ADMIN, "target": TARGET}, headers=admin).json()
    try:
        iid = park(client, actors)
        done = answer_as(client, actors, ADMIN, iid) if act == "answer" else cancel_as(client, actors, ADMIN, iid)
        assert done.status_code == 200, done.text
        assert status_of(iid) == ("answered" if act == "answer" else "canceled")
    finally:
        assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204


def test_agent_never_answers__also_through_the_sdk_by_name(client: TestClient, actors: Actors) -> None:
    iid = park(client, actors)
    assert answer_as(client, actors, AGENT, iid).status_code == 403
    with pytest.raises(WrongKind):  # the store decides, whichever path asks
        sdk.answer(iid, "go", response_id=uuid.uuid4().hex, principal=AGENT)
    assert status_of(iid) == "pending"


def test_agent_cancels_only_its_own_runs(client: TestClient, actors: Actors) -> None:
    # AGENT2 holds a grant on the interaction's target, but the run is AGENT's
    iid = park(client, actors)
    other = cancel_as(client, actors, AGENT2, iid)
    assert other.status_code == 403, other.text
    assert "state" not in other.json()
    with pytest.raises(Forbidden):
        sdk.cancel(iid, response_id=uuid.uuid4().hex, principal=AGENT2)
    assert status_of(iid) == "pending"
    # The owner cancels, also a question for a target it holds no grant on any more (its run's authority
    # counts): it parked there while granted, the grant revoked since
    own = cancel_as(client, actors, AGENT, iid)
    assert own.status_code == 200, own.text
    admin = actors.auth(ADMIN)
    grant = client.post("/v1/grants", json={"principal": AGENT, "target": "team:finance"}, headers=admin).json()
    elsewhere = park(client, actors, workflow="api.elsewhere", ask="team:finance")
    assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204
    assert cancel_as(client, actors, AGENT, elsewhere).status_code == 200
    assert status_of(elsewhere) == "canceled"


def test_sdk_by_name__a_disabled_principal_is_refused_first_and_the_owner_cancels(
    client: TestClient, actors: Actors
) -> None:
    # Given a human granted on the target, then disabled while a question is pending
    admin = actors.auth(ADMIN)
    made = client.post("/v1/principals", json={"kind": "human", "name": f"human-{uuid.uuid4().hex[:6]}"}, headers=admin)
    name, principal_id = made.json()["name"], made.json()["id"]
    assert client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin).status_code == 201
    iid = park(client, actors)
    assert client.delete(f"/v1/principals/{principal_id}", headers=admin).status_code == 204
    # Then by name it is no live principal, for answers and cancels, told before an unknown interaction
    for target in (iid, "0" * 32):
        with pytest.raises(Forbidden, match="does not exist or is disabled"):
            sdk.answer(target, "go", response_id=uuid.uuid4().hex, principal=name)
        with pytest.raises(Forbidden, match="does not exist or is disabled"):
            sdk.cancel(target, response_id=uuid.uuid4().hex, principal=name)
    assert status_of(iid) == "pending"
    # And the agent that owns the run cancels by name
    assert sdk.cancel(iid, response_id=uuid.uuid4().hex, principal=AGENT)["status"] == "canceled"
    assert status_of(iid) == "canceled"


def test_owner_without_a_grant_on_its_run_target__cannot_cancel(client: TestClient, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    name = f"agent-{uuid.uuid4().hex[:6]}"
    actors.tokens[name] = client.post("/v1/principals", json={"kind": "agent", "name": name}, headers=admin).json()[
        "token"
    ]
    grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin).json()
    iid = park(client, actors, owner=name)
    assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204
    assert cancel_as(client, actors, name, iid).status_code == 403
    assert status_of(iid) == "pending"


def test_cancel_retried_with_another_reason__is_409_same_reason_same_receipt(
    client: TestClient, actors: Actors
) -> None:
    iid = park(client, actors)
    first = cancel_as(client, actors, HUMAN, iid, response_id="c-1", reason="superseded")
    assert first.status_code == 200, first.text
    again = cancel_as(client, actors, HUMAN, iid, response_id="c-1", reason="superseded")
    assert again.status_code == 200 and again.json() == first.json()
    other = cancel_as(client, actors, HUMAN, iid, response_id="c-1", reason="something else")
    assert other.status_code == 409, other.text
    assert other.json()["error"] == "conflict"
    assert other.json()["state"]["status"] == "canceled" and other.json()["state"]["run_status"] == "canceled"
    no_reason = cancel_as(client, actors, HUMAN, iid, response_id="c-1")
    assert no_reason.status_code == 409
    with pytest.raises(Conflict):
        sdk.cancel(iid, response_id="c-1", principal=HUMAN, reason="something else")
    retried = sdk.cancel(iid, response_id="c-1", principal=HUMAN, reason="superseded")
    assert (retried["status"], retried["response_id"]) == ("canceled", "c-1")


def test_owner_disabled_while_parked__run_fails_closed(client: TestClient, actors: Actors) -> None:
    # Disabling revokes the principal's grants: its runs lose their authority as after a revoked grant
    admin = actors.auth(ADMIN)
    made = client.post("/v1/principals", json={"kind": "agent", "name": f"agent-{uuid.uuid4().hex[:6]}"}, headers=admin)
    name, principal_id = made.json()["name"], made.json()["id"]
    actors.tokens[name] = made.json()["token"]
    assert client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin).status_code == 201
    iid = park(client, actors, owner=name)
    assert client.delete(f"/v1/principals/{principal_id}", headers=admin).status_code == 204
    assert answer_as(client, actors, HUMAN, iid).status_code == 200
    run_id = interactions_run(iid)
    drive(run_id)
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert (run["status"], run["reason"], run["result"]) == ("interrupted", "authority revoked", None)


def interactions_run(iid: str) -> str:
    with transaction() as session:
        return str(session.scalar(select(Interaction.run_id).where(Interaction.id == iid)))


def test_granting_twice__one_live_grant_so_one_revoke_ends_the_access(client: TestClient, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    iid = park(client, actors)
    body = {"principal": STRANGER, "target": TARGET}
    first, second = (client.post("/v1/grants", json=body, headers=admin) for _ in range(2))
    assert first.status_code == second.status_code == 201, second.text
    assert second.json()["id"] == first.json()["id"]
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(STRANGER)).status_code == 200
    assert client.delete(f"/v1/grants/{first.json()['id']}", headers=admin).status_code == 204
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(STRANGER)).status_code == 403
    again = client.post("/v1/grants", json=body, headers=admin)  # a revoked grant is not handed back
    assert again.status_code == 201 and again.json()["id"] != first.json()["id"]
    assert client.delete(f"/v1/grants/{again.json()['id']}", headers=admin).status_code == 204
