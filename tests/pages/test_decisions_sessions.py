"""The Decisions page's server-side sessions: the cookie holds a random id, never the bearer token, and the
session ends when the person signs out, the token is rotated or the principal is disabled."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.metrics import OPEN_STREAMS
from parkway.db import transaction
from tests.api.conftest import ADMIN, Actors
from tests.pages.conftest import Forms
from tests.support import TARGET, wait_for

PAGE = "/decisions"


def person(client: TestClient, actors: Actors) -> dict[str, Any]:
    """A human of its own, granted on team:ops (made over HTTP by the admin)."""
    admin = actors.auth(ADMIN)
    made = client.post("/v1/principals", json={"kind": "human", "name": f"page-{uuid.uuid4().hex[:8]}"}, headers=admin)
    assert made.status_code == 201, made.text
    granted = client.post("/v1/grants", json={"principal": made.json()["name"], "target": TARGET}, headers=admin)
    assert granted.status_code == 201, granted.text
    return dict(made.json())


def sign_in(client: TestClient, token: str) -> str:
    """Sign in as a fresh browser; the session cookie's value."""
    client.cookies.clear()
    login = Forms(client.get(PAGE).text).forms["/decisions/login"]
    response = client.post(f"{PAGE}/login", data={**login, "token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return str(client.cookies["parkway_session"])


def signed_in_as(client: TestClient, name: str, cookie: str | None = None) -> bool:
    """Whether the page greets ``name``; with ``cookie``, as a browser holding that session cookie (and a
    nonce of its own: a browser without one is asked to sign in again anyway)."""
    if cookie is not None:
        client.cookies.clear()
        client.cookies.set("parkway_session", cookie, path=PAGE)
        client.cookies.set("parkway_nonce", "n" * 32, path=PAGE)
    return f"signed in as <strong>{name}</strong>" in client.get(PAGE).text


def test_cookie__is_a_random_session_id_never_the_token_and_no_bearer_token(client: TestClient, actors: Actors) -> None:
    who = person(client, actors)
    cookie = sign_in(client, who["token"])
    assert cookie != who["token"] and who["token"] not in cookie
    assert signed_in_as(client, who["name"])
    from models import principals
    from models.tables import PageSession

    # Only its hash is stored
    with transaction() as session:
        stored = session.scalars(select(PageSession.id_hash).where(PageSession.principal_id == who["id"])).all()
    assert stored == [principals.session_hash(cookie)]
    # The session id is not a bearer token
    for headers in ({"Authorization": f"Bearer {cookie}"}, {"Authorization": f"Bearer {stored[0]}"}):
        assert client.get("/v1/interactions", headers=headers).status_code == 401
    # Two sign-ins are two sessions
    assert sign_in(client, who["token"]) != cookie


def test_sign_out__ends_the_session_on_the_server(client: TestClient, actors: Actors) -> None:
    who = person(client, actors)
    cookie = sign_in(client, who["token"])
    logout = Forms(client.get(PAGE).text).forms["/decisions/logout"]
    assert client.post(f"{PAGE}/logout", data=logout, follow_redirects=False).status_code == 303
    # A copy of the old cookie signs no one in any more
    assert not signed_in_as(client, who["name"], cookie)
    assert client.get(f"{PAGE}/stream").status_code == 401


@pytest.mark.parametrize("how", ["rotate", "disable"])
def test_rotating_or_disabling__ends_every_session_of_the_principal(
    client: TestClient, actors: Actors, how: str
) -> None:
    who = person(client, actors)
    first, second = sign_in(client, who["token"]), sign_in(client, who["token"])
    assert signed_in_as(client, who["name"], first) and signed_in_as(client, who["name"], second)
    admin = actors.auth(ADMIN)
    if how == "rotate":
        assert client.post(f"/v1/principals/{who['id']}/token", headers=admin).status_code == 201
    else:
        assert client.delete(f"/v1/principals/{who['id']}", headers=admin).status_code == 204
    assert not signed_in_as(client, who["name"], first)
    assert not signed_in_as(client, who["name"], second)
    # And the old token cannot start a new one
    client.cookies.clear()
    login = Forms(client.get(PAGE).text).forms["/decisions/login"]
    assert client.post(f"{PAGE}/login", data={**login, "token": who["token"]}).status_code == 401


def test_open_stream__ends_when_the_principal_is_disabled(client: TestClient, actors: Actors) -> None:
    who = person(client, actors)
    sign_in(client, who["token"])
    streams = OPEN_STREAMS._value.get()
    result: dict[str, Any] = {}

    def follow() -> None:
        response = client.get(f"{PAGE}/stream")  # with the cookie sign_in left
        result.update(status=response.status_code, body=response.text)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    wait_for(lambda: OPEN_STREAMS._value.get() > streams, timeout=20, what="the stream to open")
    assert reader.is_alive()
    assert client.delete(f"/v1/principals/{who['id']}", headers=actors.auth(ADMIN)).status_code == 204
    reader.join(timeout=30)
    assert not reader.is_alive(), "the stream outlived its session"
    assert result["status"] == 200 and result["body"].startswith("retry:")
