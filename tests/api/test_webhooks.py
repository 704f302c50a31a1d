"""Webhook subscriptions over the API: admins only, the secret shown once and stored sealed, bad input 422
with nothing stored; outbound URLs (webhooks and push handlers) checked in every address form when saved,
and again when a delivery connects."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from models.webhook_tables import Webhook
from parkway import netguard
from parkway.crypto import unseal
from parkway.db import transaction
from tasks.webhooks import deliver
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors
from tests.support import TARGET, wait_for

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
    # A seq past PostgreSQL's bigint is a bad request, not a server error (schemathesis found the 500)
    assert client.post(f"{path}/replay", json={"after_seq": 2**63}, headers=admin).status_code == 422
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


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("[64:ff9b::7f00:1]:8000", "64:ff9b::7f00:1, the NAT64 form of 127.0.0.1, a loopback address"),
        ("[2002:a9fe:a9fe::1]", "2002:a9fe:a9fe::1, the 6to4 form of 169.254.169.254, a link-local address"),
        ("[::10.1.2.3]", "::a01:203, the IPv4-compatible form of 10.1.2.3, a private address"),
        ("[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe, the IPv4-mapped form of 169.254.169.254, a link-local address"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/webhooks", "/v1/handlers"])
def test_outbound_url__an_embedded_ipv4_form_of_a_private_address_is_422_with_the_reason_and_nothing_stored(
    client: TestClient, actors: Actors, path: str, host: str, why: str
) -> None:
    # Given a URL whose host is an IPv6 address carrying a loopback, link-local or private IPv4 address
    admin, what = actors.auth(ADMIN), ({"events": ["*"]} if path == "/v1/webhooks" else {"serves": ["api.login"]})
    before = client.get(path, headers=admin).json()["items"]

    # When it is saved as a webhook or as a push handler
    refused = client.post(path, json={"url": f"http://{host}/hook", **what}, headers=admin)

    # Then it is refused, saying which address it is and why, and nothing is stored
    assert refused.status_code == 422, refused.text
    assert why in refused.json()["detail"]
    assert client.get(path, headers=admin).json()["items"] == before


NAME = "receiver.parkway.test"  # a name this test resolves: public when saved, a loopback's NAT64 form later


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def test_delivery__a_host_that_resolves_to_an_embedded_loopback_later_is_refused_at_connect(
    client: TestClient, actors: Actors, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a subscription saved while its host resolved to a public address
    port, answers = listener.getsockname()[1], {NAME: "93.184.216.34"}
    resolve = socket.getaddrinfo

    def resolved(host: str, *args: Any, **kwargs: Any) -> Any:  # the name-resolution step only
        if host != NAME:
            return resolve(host, *args, **kwargs)
        family = socket.AF_INET6 if ":" in answers[NAME] else socket.AF_INET
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (answers[NAME], port))]

    monkeypatch.setattr(netguard.socket, "getaddrinfo", resolved)
    admin = actors.auth(ADMIN)
    made = client.post("/v1/webhooks", json={"url": f"http://{NAME}:{port}/hook", "events": ["run.created"]},
                       headers=admin)  # fmt: skip
    assert made.status_code == 201, made.text
    hook_id = made.json()["id"]

    # When it now resolves to 127.0.0.1 through NAT64 (outside 127.0.0.0/8, the allowed network of the tests),
    # and an event of it is delivered
    answers[NAME] = "64:ff9b::7f00:1"
    started = client.post("/v1/runs", json={"workflow": "api.login", "payload": {}, "target": TARGET},
                          headers=actors.auth(AGENT))  # fmt: skip
    assert started.status_code == 201, started.text
    wait_for(lambda: deliver(hook_id) == "retry", what="a failed delivery attempt")

    # Then nothing connected, and the delivery log says why
    with pytest.raises(BlockingIOError):
        listener.accept()
    [line] = client.get(f"/v1/webhooks/{hook_id}/deliveries", headers=admin).json()["items"]
    assert line["status_code"] is None
    assert "resolves to 64:ff9b::7f00:1, the NAT64 form of 127.0.0.1, a loopback address" in line["error"]
    assert client.delete(f"/v1/webhooks/{hook_id}", headers=admin).status_code == 204
