"""``GET /v1/grants`` (admins): paged like the other lists, filtered by principal and target, revoked ones
on request (issue 35 §5)."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors


def _pages(client: TestClient, actors: Actors, **params: object) -> list[dict[str, object]]:
    """Every item of the list, page by page (two at a time)."""
    items, cursor = [], None
    while True:
        query = {"limit": 2, **params, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/grants", params=query, headers=actors.auth(ADMIN))
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        cursor = page.json()["next"]
        if cursor is None:
            return items


def test_list_grants__admins_page_them_oldest_first_by_principal_and_target(client: TestClient, actors: Actors) -> None:
    # Given three grants of one human on targets of its own, one of them revoked
    admin = actors.auth(ADMIN)
    targets = [f"team:g{uuid.uuid4().hex[:6]}" for _ in range(3)]
    made = [client.post("/v1/grants", json={"principal": HUMAN, "target": t}, headers=admin).json() for t in targets]
    assert client.delete(f"/v1/grants/{made[1]['id']}", headers=admin).status_code == 204

    # When an admin lists them, by principal, by target, revoked ones too
    live = [g for g in _pages(client, actors, principal=HUMAN) if g["target"] in targets]
    every = [g for g in _pages(client, actors, principal=HUMAN, revoked="true") if g["target"] in targets]
    one = _pages(client, actors, target=targets[2])

    # Then each grant comes once, oldest first, in the shape POST /v1/grants returns
    assert [g["id"] for g in live] == [made[0]["id"], made[2]["id"]]
    assert [g["id"] for g in every] == [g["id"] for g in made] and every[1]["revoked_at"] is not None
    assert one == [{**made[2], "principal": HUMAN}]
    assert set(one[0]) == {"id", "principal", "target", "created_at", "revoked_at"}
    assert {g["principal"] for g in _pages(client, actors)} >= {AGENT, HUMAN}


def test_list_grants__only_admins_and_a_bad_cursor_is_422(client: TestClient, actors: Actors) -> None:
    for who in (HUMAN, AGENT):
        assert client.get("/v1/grants", headers=actors.auth(who)).status_code == 403
    assert client.get("/v1/grants").status_code == 401
    bad = client.get("/v1/grants", params={"cursor": "bm90LWEtY3Vyc29y"}, headers=actors.auth(ADMIN))
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_cursor", bad.text
    assert client.get("/v1/grants", params={"limit": 0}, headers=actors.auth(ADMIN)).status_code == 422
