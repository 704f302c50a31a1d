"""Payloads checked at the door (issue 43, item 7): a start whose payload does not match what its workflow
declares (``@step(name, payload=Model)`` or a JSON Schema) is 422 with each problem and nothing stored,
through HTTP and the SDK alike; the body receives the model's instance; the OpenAPI shows each schema."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from models.tables import Event, Run
from parkway.db import transaction
from tasks import sdk
from tests.api.conftest import AGENT, Actors, drive
from tests.support import TARGET


def stored() -> tuple[int, int]:
    """How many runs and events the database holds."""
    with transaction() as session:
        runs = session.scalar(select(func.count()).select_from(Run))
        events = session.scalar(select(func.count()).select_from(Event))
    return int(runs or 0), int(events or 0)


def start(client: TestClient, actors: Actors, workflow: str, payload: Any, **headers: str) -> Any:
    body = {"workflow": workflow, "payload": payload, "target": TARGET}
    return client.post("/v1/runs", json=body, headers={**actors.auth(AGENT), **headers})


def test_start__payload_missing_a_field_is_422_with_each_problem_and_nothing_stored(
    client: TestClient, actors: Actors
) -> None:
    before = stored()
    # The token is marked secret (SecretStr): neither its value nor a message quoting it comes back
    refused = start(client, actors, "api.deploy", {"replicas": 0, "token": 987654321}, **{"Idempotency-Key": "p-1"})
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["error"] == "invalid_payload", body
    assert {"loc": ["payload", "service"], "msg": "Field required", "type": "missing"} in body["problems"]
    assert {"loc": ["payload", "replicas"], "type": "greater_than_equal"}.items() <= body["problems"][1].items()
    assert "payload.service: Field required" in body["errors"]
    assert "987654321" not in refused.text
    assert stored() == before  # no run row, no event
    # The same key with a payload that matches starts the run: the refusal kept nothing of it
    made = start(client, actors, "api.deploy", {"service": "api"}, **{"Idempotency-Key": "p-1"})
    assert made.status_code == 201, made.text


def test_start__json_schema_payload_is_checked_without_echoing_values(client: TestClient, actors: Actors) -> None:
    before = stored()
    refused = start(client, actors, "api.window", {"window": "someday", "otp": 424242})
    assert refused.status_code == 422, refused.text
    problems = {tuple(p["loc"]): p for p in refused.json()["problems"]}
    assert problems[("payload", "window")]["type"] == "enum"
    assert problems[("payload", "otp")]["type"] == "type"
    assert "someday" not in refused.text and "424242" not in refused.text
    assert stored() == before


def test_start__the_body_receives_the_models_instance(client: TestClient, actors: Actors) -> None:
    made = start(client, actors, "api.deploy", {"service": "billing", "token": "s3cret"})
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    drive(run_id)
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(AGENT)).json()
    assert run["status"] == "completed", run
    assert run["result"] == {"received": "Deployment", "service": "billing", "replicas": 1}
    # A JSON Schema's step receives the payload as it came, checked
    made = start(client, actors, "api.window", {"window": "now"})
    drive(made.json()["id"])
    run = client.get(f"/v1/runs/{made.json()['id']}", headers=actors.auth(AGENT)).json()
    assert run["result"] == {"received": "dict", "window": "now"}, run


def test_start__a_workflow_declaring_nothing_takes_any_payload_as_before(client: TestClient, actors: Actors) -> None:
    made = start(client, actors, "api.ask_any", ["any", {"json": 1}])
    assert made.status_code == 201, made.text


def test_sdk_start_run__payload_that_does_not_match_raises_and_stores_nothing(actors: Actors) -> None:
    before = stored()
    with pytest.raises(sdk.InvalidPayload) as refused:
        sdk.start_run("api.deploy", {"service": ""}, principal=AGENT, target=TARGET)
    assert refused.value.code == "invalid_payload"
    assert refused.value.problems == [
        {"loc": ["payload", "service"], "msg": "String should have at least 1 character", "type": "string_too_short"}
    ]
    assert stored() == before


def test_openapi__the_start_route_shows_each_workflows_payload_schema(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    start_run = document["paths"]["/v1/runs"]["post"]
    variants = start_run["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    refs = [v["$ref"].rsplit("/", 1)[1] for v in variants]
    assert "workflow.api.deploy.start" in refs and "workflow.api.window.start" in refs
    deploy = schemas["workflow.api.deploy.start"]
    assert deploy["properties"]["workflow"]["enum"] == ["api.deploy"]
    assert deploy["properties"]["payload"]["$ref"] == "#/components/schemas/workflow.api.deploy.payload"
    assert "payload" in deploy["required"]
    payload = schemas["workflow.api.deploy.payload"]
    assert payload["required"] == ["service"] and payload["properties"]["token"]["anyOf"][0]["writeOnly"] is True
    assert schemas["workflow.api.window.payload"]["properties"]["window"] == {"enum": ["now", "tonight"]}
    # Every other workflow this process runs takes any payload, by name; the generic shape stays for clients
    others = schemas["workflow.others.start"]["properties"]["workflow"]["enum"]
    assert "api.ask_any" in others and "api.deploy" not in others
    assert "RunCreate" in schemas
    refused = start_run["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
    assert "problems" in schemas[refused.rsplit("/", 1)[1]]["properties"]
