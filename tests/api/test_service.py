"""The service around the routes: health, readiness, metrics, body limit, error shapes, OpenAPI, startup."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from api.app import create_app
from models.tables import Run
from parkway.db import get_engine, transaction
from parkway.settings import reset_settings
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors
from tests.support import TARGET

MIB = 1 << 20


def set_revision(revision: str | None) -> None:
    with get_engine().begin() as conn:
        if revision is None:
            conn.execute(text("DELETE FROM alembic_version"))
        else:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})


def test_healthz_and_readyz__ok(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


def test_root__says_where_the_pages_and_the_api_description_are(client: TestClient) -> None:
    index = client.get("/")
    assert index.status_code == 200, index.text
    where = index.json()
    assert where["decisions"] == "/decisions" and where["docs"] == "/docs" and where["openapi"] == "/openapi.json"
    for path in where.values():
        if path.startswith("/"):
            assert client.get(path).status_code == 200, path
    assert "/" not in client.get("/openapi.json").json()["paths"]


def test_readyz__503_when_the_schema_changes_under_a_running_app(client: TestClient, fresh_db: str) -> None:
    assert client.get("/readyz").status_code == 200
    set_revision("ffff_from_the_future")
    newer = client.get("/readyz")
    assert newer.status_code == 503
    assert newer.json()["error"] == "not_ready" and "newer than this code knows" in newer.json()["detail"]
    set_revision(None)
    assert "parkway migrate" in client.get("/readyz").json()["detail"]
    assert client.get("/healthz").status_code == 200  # alive, just not ready


def test_readyz__503_when_the_broker_is_unreachable(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.celery_app import app as celery_app

    monkeypatch.setitem(celery_app.conf, "broker_url", "redis://127.0.0.1:9/0")
    monkeypatch.setitem(celery_app.conf, "broker_transport_options", {})
    response = client.get("/readyz")
    assert response.status_code == 503 and "broker" in response.json()["detail"]


def test_readyz__names_every_problem_not_only_the_first(
    client: TestClient, fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.celery_app import app as celery_app

    set_revision("ffff_from_the_future")
    monkeypatch.setitem(celery_app.conf, "broker_url", "redis://127.0.0.1:9/0")
    monkeypatch.setitem(celery_app.conf, "broker_transport_options", {})
    detail = client.get("/readyz").json()["detail"]
    assert "newer than this code knows" in detail and "the broker is unreachable" in detail, detail


@pytest.fixture
def restore_settings() -> Iterator[None]:
    yield
    reset_settings()


def test_startup__refused_with_a_weak_secret_key(monkeypatch: pytest.MonkeyPatch, restore_settings: None) -> None:
    monkeypatch.setenv("PARKWAY_SECRET_KEY", "change-me")
    reset_settings()
    with pytest.raises(RuntimeError, match="refusing to start: PARKWAY_SECRET_KEY"), TestClient(create_app()):
        pass


@pytest.mark.parametrize(("revision", "says"), [("ffff_future", "newer than this code"), (None, "no Parkway schema")])
def test_startup__refused_on_a_schema_it_does_not_match(fresh_db: str, revision: str | None, says: str) -> None:
    set_revision(revision)
    with pytest.raises(RuntimeError, match=says), TestClient(create_app()):
        pass


def runs() -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def test_body_over_1_mib__413_before_it_is_read(client: TestClient, actors: Actors) -> None:
    before = runs()
    big = b'{"workflow": "t.ask_one", "target": "team:ops", "payload": "' + b"x" * MIB + b'"}'
    declared = client.post("/v1/runs", content=big, headers={**actors.auth(AGENT), "Content-Type": "application/json"})
    assert declared.status_code == 413
    assert declared.json()["error"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it streams
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = client.post(
        "/v1/runs", content=chunks(), headers={**actors.auth(AGENT), "Content-Type": "application/json"}
    )
    assert streamed.status_code == 413 and streamed.json()["error"] == "too_large"
    # Even without a token the body is refused first, and an answer body is capped the same way
    assert client.post("/v1/interactions/x/answer", content=big).status_code == 413
    assert runs() == before
    # Just under the limit is read as usual
    small = client.post(
        "/v1/runs",
        json={"workflow": "t.ask_one", "payload": {"pad": "x" * (MIB - 200)}, "target": TARGET},
        headers=actors.auth(AGENT),
    )
    assert small.status_code == 201


def test_errors__json_shape_for_unknown_routes_methods_and_validation(client: TestClient, actors: Actors) -> None:
    unknown = client.get("/nowhere")
    assert unknown.status_code == 404 and unknown.json() == {
        "error": "not_found",
        "detail": "no such resource",
    }
    wrong = client.put("/v1/runs", headers=actors.auth(AGENT))
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
    invalid = client.post("/v1/runs", content=b"{", headers={**actors.auth(AGENT), "Content-Type": "application/json"})
    assert invalid.status_code == 422 and invalid.json()["error"] == "validation_error"
    kind = client.post("/v1/principals", json={"kind": "robot", "name": "r2"}, headers=actors.auth(ADMIN))
    assert kind.status_code == 422 and "kind" in kind.json()["detail"]
    # Text the database could not store (NUL) or cannot decode is refused as invalid, never a 500
    nul = client.get("/v1/interactions", params={"target": "a\x00b"}, headers=actors.auth(HUMAN))
    assert nul.status_code == 422
    assert client.get("/v1/runs/a%00b", headers=actors.auth(HUMAN)).status_code == 422
    body = {"workflow": "t.ask_one\x00", "payload": {}, "target": TARGET}
    assert client.post("/v1/runs", json=body, headers=actors.auth(AGENT)).status_code == 422
    binary = client.post(
        "/v1/principals",
        content=b"\xff\xfe{",
        headers={**actors.auth(ADMIN), "Content-Type": "application/json"},
    )
    assert binary.status_code == 422 and binary.json()["error"] == "validation_error"


def test_principals_and_grants__created_taken_unknown(client: TestClient, actors: Actors) -> None:
    admin = actors.auth(ADMIN)
    made = client.post("/v1/principals", json={"kind": "human", "name": "zoe"}, headers=admin)
    assert made.status_code == 201
    assert set(made.json()) == {"id", "kind", "name", "token"} and made.json()["token"].startswith("pk_")
    taken = client.post("/v1/principals", json={"kind": "agent", "name": "zoe"}, headers=admin)
    assert taken.status_code == 409 and taken.json()["error"] == "conflict"
    token = {"Authorization": f"Bearer {made.json()['token']}"}
    assert client.get("/v1/interactions", headers=token).status_code == 200
    grant = client.post("/v1/grants", json={"principal": "zoe", "target": "user:zoe"}, headers=admin)
    assert grant.status_code == 201 and {"id", "principal", "target"} <= set(grant.json())
    nobody = client.post("/v1/grants", json={"principal": "nobody", "target": "user:x"}, headers=admin)
    assert nobody.status_code == 422 and nobody.json()["error"] == "unknown_principal"


def test_metrics__answers_by_outcome_continuations_by_status_latency(client: TestClient, actors: Actors) -> None:
    client.post("/v1/interactions/none/answer", json={"response_id": "r", "value": 1}, headers=actors.auth(HUMAN))
    client.get("/healthz")
    body = client.get("/metrics").text
    assert 'parkway_answers_total{outcome="not_found"}' in body
    assert 'parkway_continuations{status="ready"}' in body and 'parkway_continuations{status="dead"}' in body
    assert 'parkway_http_request_duration_seconds_bucket{le="0.005",method="GET",route="/healthz",status="200"}' in body
    assert "parkway_event_streams_open" in body


def test_openapi__documents_every_error_response(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    # One model per error: 422 lists its problems, 409/410 of an answer or cancel carry the interaction.
    interaction_outcomes = {"409": "InteractionConflict", "410": "InteractionGone"}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            if path.startswith("/v1/"):
                assert {"401", "422"} <= codes, (method, path, codes)
                for code in codes - {"200", "201", "202", "204"}:
                    ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
                    if code == "422":
                        expected = "ValidationErrorBody"
                    elif path.startswith("/v1/interactions/") and code in interaction_outcomes:
                        expected = interaction_outcomes[code]
                    elif path == "/v1/runs" and code == "409":
                        expected = "RunConflict"
                    else:
                        expected = "ErrorBody"
                    assert ref.rpartition("/")[2] == expected, (method, path, code)
            if method in ("post", "put", "patch"):
                assert "413" in codes, (method, path)
    answer = spec["paths"]["/v1/interactions/{interaction_id}/answer"]["post"]["responses"]
    assert {"200", "401", "403", "404", "409", "410", "413", "422"} <= set(answer)
    for model in ("InteractionConflict", "InteractionGone"):
        assert schemas[model]["properties"]["state"]["$ref"].endswith("/InteractionState"), model
        assert "state" in schemas[model]["required"]
    assert "run_status" in schemas["InteractionState"]["required"]


def test_openapi__operation_ids_are_stable_names(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ids = {(method, path): op["operationId"] for path, ops in spec["paths"].items() for method, op in ops.items()}
    assert ids == {
        ("post", "/v1/runs"): "start_run",
        ("get", "/v1/runs"): "list_runs",
        ("get", "/v1/runs/{run_id}"): "get_run",
        ("get", "/v1/runs/{run_id}/events"): "list_run_events",
        ("get", "/v1/events/stream"): "stream_events",
        ("get", "/v1/interactions"): "list_interactions",
        ("get", "/v1/interactions/{interaction_id}"): "get_interaction",
        ("post", "/v1/interactions/{interaction_id}/answer"): "answer_interaction",
        ("post", "/v1/interactions/{interaction_id}/cancel"): "cancel_interaction",
        ("post", "/v1/interactions/{interaction_id}/delegate"): "delegate_interaction",
        ("post", "/v1/interactions/{interaction_id}/links"): "create_approval_link",
        ("post", "/v1/principals"): "create_principal",
        ("get", "/v1/principals"): "list_principals",
        ("delete", "/v1/principals/{principal_id}"): "disable_principal",
        ("post", "/v1/principals/{principal_id}/token"): "rotate_principal_token",
        ("post", "/v1/grants"): "create_grant",
        ("get", "/v1/grants"): "list_grants",
        ("delete", "/v1/grants/{grant_id}"): "revoke_grant",
        ("get", "/v1/workers"): "list_workers",
        ("get", "/v1/decisions"): "export_decisions",
        ("get", "/v1/decisions/verify"): "verify_decisions",
        ("get", "/v1/decisions/key"): "seal_key",
        ("post", "/v1/worker/lease"): "lease_work",
        ("post", "/v1/worker/leases/{lease_id}/heartbeat"): "heartbeat_lease",
        ("post", "/v1/worker/leases/{lease_id}/complete"): "complete_lease",
        ("post", "/v1/worker/leases/{lease_id}/release"): "release_lease",
        ("post", "/v1/worker/leases/{lease_id}/tools"): "record_tool_intent",
        ("post", "/v1/worker/leases/{lease_id}/tools/{key}/outcome"): "record_tool_outcome",
        ("post", "/v1/handlers"): "create_push_handler",
        ("get", "/v1/handlers"): "list_push_handlers",
        ("delete", "/v1/handlers/{handler_id}"): "delete_push_handler",
        ("post", "/v1/webhooks"): "create_webhook",
        ("get", "/v1/webhooks"): "list_webhooks",
        ("get", "/v1/webhooks/{webhook_id}"): "get_webhook",
        ("patch", "/v1/webhooks/{webhook_id}"): "change_webhook",
        ("delete", "/v1/webhooks/{webhook_id}"): "delete_webhook",
        ("post", "/v1/webhooks/{webhook_id}/secret"): "rotate_webhook_secret",
        ("post", "/v1/webhooks/{webhook_id}/replay"): "replay_webhook",
        ("get", "/v1/webhooks/{webhook_id}/deliveries"): "list_webhook_deliveries",
        ("get", "/healthz"): "get_liveness",
        ("get", "/readyz"): "get_readiness",
        ("get", "/metrics"): "get_metrics",
    }
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_options_and_405__allow_names_every_method_the_path_serves(client: TestClient, actors: Actors) -> None:
    # Given every path of the live schema, with each path parameter filled in
    spec = client.get("/openapi.json").json()
    for path, operations in spec["paths"].items():
        concrete = path.replace("{", "x").replace("}", "")
        served = {method.upper() for method in operations}

        # When it is asked with OPTIONS, a method it does not serve
        refused = client.options(concrete, headers=actors.auth(ADMIN))

        # Then the 405 names all its methods, not only those of the first route matched
        assert refused.status_code == 405, (path, refused.text)
        assert set(refused.headers["allow"].split(", ")) == served, (path, refused.headers["allow"])
