"""A token's lifecycle over a real uvicorn: list principals, disable one, rotate a token; after restarts too."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from models.tables import Grant, Principal
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, ApiServer, drive, make_actors
from tests.pages.conftest import Forms
from tests.support import TARGET, interactions


@pytest.fixture(scope="module")
def http(server: ApiServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def actors(http: httpx.Client) -> Actors:
    return make_actors(http)


def new_principal(http: httpx.Client, actors: Actors, kind: str = "human", *, grant: bool = True) -> dict[str, Any]:
    """A principal of its own (made over HTTP by the admin), granted on team:ops unless told otherwise."""
    admin = actors.auth(ADMIN)
    made = http.post("/v1/principals", json={"kind": kind, "name": f"{kind}-{uuid.uuid4().hex[:8]}"}, headers=admin)
    assert made.status_code == 201, made.text
    if grant:
        granted = http.post("/v1/grants", json={"principal": made.json()["name"], "target": TARGET}, headers=admin)
        assert granted.status_code == 201, granted.text
    return dict(made.json())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def parked_question(http: httpx.Client, actors: Actors) -> str:
    body = {"workflow": "t.ask_one", "payload": {}, "target": TARGET}
    made = http.post("/v1/runs", json=body, headers=actors.auth(AGENT))
    assert made.status_code == 201, made.text
    drive(made.json()["id"])
    return str(interactions(made.json()["id"])["go"].id)


def sign_in(server: ApiServer, token: str) -> httpx.Client:
    """A browser of its own signed in to the Decisions page with ``token``."""
    browser = server.client()
    login = Forms(browser.get("/decisions").text).forms["/decisions/login"]
    response = browser.post("/decisions/login", data={**login, "token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return browser


def signed_in_as(browser: httpx.Client, name: str) -> bool:
    return f"signed in as <strong>{name}</strong>" in browser.get("/decisions").text


def test_list_principals__admins_only_and_never_a_token_or_its_hash(http: httpx.Client, actors: Actors) -> None:
    made = new_principal(http, actors)
    listed = http.get("/v1/principals", headers=actors.auth(ADMIN))
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert set(body) == {"items", "next"}
    mine = next(p for p in body["items"] if p["name"] == made["name"])
    assert mine == {
        "id": made["id"],
        "kind": "human",
        "name": made["name"],
        "created_at": mine["created_at"],
        "disabled_at": None,
    }
    with transaction() as session:
        hashes = [h for h in session.scalars(select(Principal.token_hash)) if h]
    for secret in [*actors.tokens.values(), made["token"], *hashes]:
        assert secret not in listed.text
    assert {ADMIN, AGENT, HUMAN} <= {p["name"] for p in body["items"]}
    # Paging by name, each principal once
    names, cursor = [], None
    while True:
        page = http.get("/v1/principals", params={"limit": 2, **({"cursor": cursor} if cursor else {})},
                        headers=actors.auth(ADMIN)).json()  # fmt: skip
        names += [p["name"] for p in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert names == sorted(names) == sorted(p["name"] for p in body["items"])
    for who in (HUMAN, AGENT):
        assert http.get("/v1/principals", headers=actors.auth(who)).status_code == 403


def test_disable__401_at_once_and_after_a_restart_grants_revoked_name_taken(
    server: ApiServer, http: httpx.Client, actors: Actors
) -> None:
    made = new_principal(http, actors)
    iid = parked_question(http, actors)
    token = made["token"]
    assert http.get(f"/v1/interactions/{iid}", headers=bearer(token)).status_code == 200
    browser = sign_in(server, token)
    assert signed_in_as(browser, made["name"])
    # When an admin disables it
    assert http.delete(f"/v1/principals/{made['id']}", headers=actors.auth(ADMIN)).status_code == 204
    # Then its token is refused at once, for reads and for answers, and its page session has ended
    assert http.get("/v1/interactions", headers=bearer(token)).status_code == 401
    answered = http.post(f"/v1/interactions/{iid}/answer", json={"response_id": "x", "value": "go"},
                         headers=bearer(token))  # fmt: skip
    assert answered.status_code == 401
    assert not signed_in_as(browser, made["name"])
    assert browser.get("/decisions/stream").status_code == 401
    # And its grants are revoked, its name stays taken, and disabling again is a no-op
    with transaction() as session:
        grants = session.scalars(select(Grant.revoked_at).where(Grant.principal_id == made["id"])).all()
    assert grants and all(at is not None for at in grants)
    again = http.post("/v1/principals", json={"kind": "human", "name": made["name"]}, headers=actors.auth(ADMIN))
    assert again.status_code == 409
    assert http.delete(f"/v1/principals/{made['id']}", headers=actors.auth(ADMIN)).status_code == 204
    regrant = http.post("/v1/grants", json={"principal": made["name"], "target": TARGET}, headers=actors.auth(ADMIN))
    assert regrant.status_code == 422 and "is disabled" in regrant.json()["detail"], regrant.text
    nobody = http.post("/v1/grants", json={"principal": f"nobody-{made['id']}", "target": TARGET},
                       headers=actors.auth(ADMIN))  # fmt: skip
    assert nobody.status_code == 422 and "is disabled" not in nobody.json()["detail"], nobody.text
    listed = http.get("/v1/principals", params={"limit": 200}, headers=actors.auth(ADMIN)).json()["items"]
    assert next(p for p in listed if p["id"] == made["id"])["disabled_at"] is not None
    # And after the API restarts, still 401 (the state is in the database)
    server.restart()
    with server.client() as fresh:
        assert fresh.get("/v1/interactions", headers=bearer(token)).status_code == 401
        assert fresh.get("/v1/interactions", headers=actors.auth(HUMAN)).status_code == 200
    assert not signed_in_as(browser, made["name"])
    browser.close()
    assert http.get("/v1/interactions", headers=bearer(token)).status_code == 401


def test_disable__unknown_is_404_oneself_409_and_only_admins(http: httpx.Client, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    assert http.delete(f"/v1/principals/{'0' * 32}", headers=admin).status_code == 404
    me = next(p for p in http.get("/v1/principals", params={"limit": 200}, headers=admin).json()["items"]
              if p["name"] == ADMIN)  # fmt: skip
    assert http.delete(f"/v1/principals/{me['id']}", headers=admin).status_code == 409
    victim = new_principal(http, actors)
    for who in (HUMAN, AGENT):
        assert http.delete(f"/v1/principals/{victim['id']}", headers=actors.auth(who)).status_code == 403
        assert http.post(f"/v1/principals/{victim['id']}/token", headers=actors.auth(who)).status_code == 403
    assert http.get("/v1/interactions", headers=bearer(victim["token"])).status_code == 200


def test_rotate__old_token_401_at_once_new_one_works_page_session_ends(
    server: ApiServer, http: httpx.Client, actors: Actors
) -> None:
    made = new_principal(http, actors)
    old = made["token"]
    browser = sign_in(server, old)
    assert signed_in_as(browser, made["name"])
    # When an admin rotates its token
    rotated = http.post(f"/v1/principals/{made['id']}/token", headers=actors.auth(ADMIN))
    assert rotated.status_code == 201, rotated.text
    body = rotated.json()
    assert set(body) == {"id", "kind", "name", "token"}
    assert (body["id"], body["kind"], body["name"]) == (made["id"], "human", made["name"])
    new = body["token"]
    assert new != old and new.startswith("pk_")
    # Then the old token is refused at once, the new one works with the same grants
    assert http.get("/v1/interactions", headers=bearer(old)).status_code == 401
    iid = parked_question(http, actors)
    assert http.get(f"/v1/interactions/{iid}", headers=bearer(new)).status_code == 200
    # And the page session made with the old token has ended; one made with the new token works
    assert not signed_in_as(browser, made["name"])
    browser.close()
    again = sign_in(server, new)
    assert signed_in_as(again, made["name"])
    again.close()
    # Unknown: 404; disabled: 409
    assert http.post(f"/v1/principals/{'0' * 32}/token", headers=actors.auth(ADMIN)).status_code == 404
    assert http.delete(f"/v1/principals/{made['id']}", headers=actors.auth(ADMIN)).status_code == 204
    assert http.post(f"/v1/principals/{made['id']}/token", headers=actors.auth(ADMIN)).status_code == 409
    assert http.get("/v1/interactions", headers=bearer(new)).status_code == 401


@pytest.mark.parametrize("change", ["disabled", "rotated"])
def test_open_event_stream__ends_once_its_token_stops_working(
    server: ApiServer, http: httpx.Client, actors: Actors, change: str
) -> None:
    made = new_principal(http, actors, kind="admin", grant=False)  # an admin sees every event: no grant to lose
    opened, lines = threading.Event(), []

    def follow() -> None:
        with server.client() as reader, reader.stream("GET", "/v1/events/stream", headers=bearer(made["token"])) as r:
            lines.append(str(r.status_code))
            opened.set()
            lines.extend(r.iter_lines())  # until the server ends the stream

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert opened.wait(timeout=20) and lines[0] == "200"
    if change == "disabled":
        assert http.delete(f"/v1/principals/{made['id']}", headers=actors.auth(ADMIN)).status_code == 204
    else:
        assert http.post(f"/v1/principals/{made['id']}/token", headers=actors.auth(ADMIN)).status_code == 201
    iid = parked_question(http, actors)  # events its old token must not be shown
    thread.join(timeout=20)
    assert not thread.is_alive(), f"the stream outlived its {change} token: {lines[-3:]}"
    assert not any(iid in line for line in lines)


def test_event_stream__a_last_event_id_no_stream_sent_starts_from_after(http: httpx.Client, actors: Actors) -> None:
    parked_question(http, actors)  # an event after 0
    for header in ("99999999999999999999", str(2**63), "-1", "12a"):
        with http.stream("GET", "/v1/events/stream", params={"after": 0}, headers={
            **actors.auth(ADMIN), "Last-Event-ID": header}) as response:  # fmt: skip
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("retry:")
            assert any(line.startswith("id: ") for line in lines), header  # the events after 0, not an error
