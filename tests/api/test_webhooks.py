"""Webhook subscriptions over the API: admins only, the secret shown once and stored sealed, bad input 422
with nothing stored."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from models.webhook_tables import Webhook
from parkway.crypto import unseal
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors

URL = "http://127.0.0.1:9/hook"


def count() -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Webhook)) or 0)


def create(client: TestClient, actors: Actors, **body: Any) -> Any:
    return client.post(
        "/v1/webhooks", json={"url": URL, "events": ["interaction.*"], **body}, headers=actors.auth(ADMIN)
    )


def test_create__secret_shown_once_and_stored_sealed(client: TestClient, actors: Actors) -> None:
    made = create(client, actors, targets=["team:ops"], description="ops chat")
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["secret"].startswith("whsec_") and len(base64.b64decode(body["secret"][6:])) == 24
    assert body["status"] == "active" and body["targets"] == ["team:ops"]

    # The secret is in no later read, and the database holds it only sealed
    shown = client.get(f"/v1/webhooks/{body['id']}", headers=actors.auth(ADMIN))
    listed = client.get("/v1/webhooks", headers=actors.auth(ADMIN))
    assert shown.status_code == 200 and listed.status_code == 200
    assert body["secret"] not in shown.text + listed.text and "secret" not in shown.json()
    assert body["id"] in [h["id"] for h in listed.json()["items"]]
    with transaction() as session:
        sealed = session.get(Webhook, body["id"])
        assert sealed is not None and body["secret"] not in sealed.secret_sealed
        assert unseal(sealed.secret_sealed) == body["secret"]


@pytest.mark.parametrize(
    "body",
    [
        {"events": ["interaction.askd"]},  # no such type
        {"events": ["nothing.*"]},  # no such family
        {"events": []},
        {"url": "ftp://127.0.0.1/hook"},
        {"url": "file:///etc/passwd"},
        {"url": "http://10.1.2.3/hook"},  # private, not in PARKWAY_WEBHOOK_ALLOWED_NETWORKS
        {"url": "http://169.254.169.254/latest/meta-data"},  # link-local (cloud metadata)
        {"url": "http://[::1]:8000/hook"},  # loopback outside the allowed 127.0.0.0/8
        {"url": "http://no-such-host.invalid/hook"},
        {"targets": "team:ops"},
        {"targets": [""]},
        {"secret": "whsec_mine"},  # the server makes the secret
    ],
)
def test_create__bad_input_is_422_with_nothing_stored(client: TestClient, actors: Actors, body: dict[str, Any]) -> None:
    before = count()
    refused = create(client, actors, **body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "validation_error"
    assert count() == before


def test_webhooks__admins_only(client: TestClient, actors: Actors) -> None:
    hook = create(client, actors).json()
    before = count()
    for name in (AGENT, HUMAN):
        headers = actors.auth(name)
        assert client.post("/v1/webhooks", json={"url": URL, "events": ["*"]}, headers=headers).status_code == 403
        assert client.get("/v1/webhooks", headers=headers).status_code == 403
        assert client.get(f"/v1/webhooks/{hook['id']}", headers=headers).status_code == 403
        assert client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=headers).status_code == 403
        assert client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=headers).status_code == 403
        assert client.delete(f"/v1/webhooks/{hook['id']}", headers=headers).status_code == 403
        assert client.post(f"/v1/webhooks/{hook['id']}/secret", json={}, headers=headers).status_code == 403
        assert (
            client.post(f"/v1/webhooks/{hook['id']}/replay", json={"after_seq": 0}, headers=headers).status_code == 403
        )
    assert client.get("/v1/webhooks").status_code == 401
    assert count() == before
    assert client.get(f"/v1/webhooks/{hook['id']}", headers=actors.auth(ADMIN)).json()["status"] == "active"


def test_change__disable_enable_and_delete(client: TestClient, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    hook = create(client, actors).json()
    path = f"/v1/webhooks/{hook['id']}"

    disabled = client.patch(path, json={"enabled": False, "events": ["run.completed", "run.failed"]}, headers=admin)
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["status"] == "disabled" and disabled.json()["events"] == ["run.completed", "run.failed"]
    enabled = client.patch(path, json={"enabled": True}, headers=admin)
    assert enabled.json()["status"] == "active" and enabled.json()["reason"] is None

    # A bad change is refused whole: nothing of it stored
    assert client.patch(path, json={"url": "http://10.0.0.1/", "enabled": False}, headers=admin).status_code == 422
    assert client.patch(path, json={"events": None}, headers=admin).status_code == 422
    assert client.get(path, headers=admin).json() == enabled.json()

    assert client.get(f"{path}/deliveries", headers=admin).json() == {"items": [], "next": None}
    assert client.delete(path, headers=admin).status_code == 204
    assert client.get(path, headers=admin).status_code == 404
    assert client.delete(path, headers=admin).status_code == 404
    assert client.patch(path, json={"enabled": True}, headers=admin).status_code == 404
    assert client.post(f"{path}/secret", json={}, headers=admin).status_code == 404
    assert client.post(f"{path}/replay", json={"after_seq": 0}, headers=admin).status_code == 404


def test_lists__page_and_refuse_a_cursor_they_did_not_hand_out(client: TestClient, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    made = {create(client, actors).json()["id"] for _ in range(3)}
    seen: list[str] = []
    page = client.get("/v1/webhooks?limit=2", headers=admin).json()
    while True:
        seen += [h["id"] for h in page["items"]]
        if page["next"] is None:
            break
        page = client.get(f"/v1/webhooks?limit=2&cursor={page['next']}", headers=admin).json()
    assert made <= set(seen) and len(seen) == len(set(seen))
    refused = client.get("/v1/webhooks?cursor=bogus", headers=admin)
    assert refused.status_code == 422 and refused.json()["error"] == "invalid_cursor"


def test_metrics__subscriptions_by_state_the_failing_ones_and_the_lag(client: TestClient, actors: Actors) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    active, failing = create(client, actors).json()["id"], create(client, actors).json()["id"]
    with transaction() as session:
        session.execute(update(Webhook).where(Webhook.id == failing).values(status="failing", reason="500"))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for s in family.samples
    }
    assert samples[("parkway_webhooks", (("status", "failing"),))] >= 1
    assert samples[("parkway_webhook_failing", (("webhook_id", failing),))] == 1
    assert ("parkway_webhook_failing", (("webhook_id", active),)) not in samples
    assert samples[("parkway_webhook_lag_seconds", (("webhook_id", active),))] >= 0
    assert ("parkway_webhook_lag_seconds", (("webhook_id", failing),)) not in samples
