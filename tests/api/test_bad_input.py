"""What JSON and text cannot carry into Parkway is a 422 with nothing stored, never a 500 (issue 17 §2).

Lone surrogates, NUL, ``NaN``/``Infinity``/``1e400`` and nesting past ``models.jsonsafe.MAX_DEPTH``, in a run
payload, an answer's value, a run's target or a key, sent as raw body bytes the way any client library can.
"""

from __future__ import annotations

import json
import re
import socket
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.pages import forms
from models.jsonsafe import MAX_DEPTH, InvalidInput
from models.tables import Event, Run
from parkway.db import transaction
from parkway.errors import InvalidAnswer, ParkwayError
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, ApiServer, drive
from tests.support import TARGET, interactions

# Raw JSON text of values Python's json module reads but Parkway cannot store.
BAD_VALUES = {
    "lone surrogate": '"\\ud800"',
    "lone low surrogate in a key": '{"k\\udc00": 1}',
    "NUL": '"a\\u0000b"',
    "NUL in a key": '{"a\\u0000": 1}',
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "deep NaN": '{"a": [1, {"b": [NaN]}]}',
    "too deep": "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    "far too deep": "[" * 5000 + "]" * 5000,
}


def value_of(name: str) -> object:
    """The bad value as Python holds it (built by hand where ``json.loads`` itself would recurse too deep)."""
    if name == "far too deep":
        value: list[object] = []
        for _ in range(5000):
            value = [value]
        return value
    return json.loads(BAD_VALUES[name])


def counts() -> tuple[int, int]:
    with transaction() as session:
        runs = session.scalar(select(func.count()).select_from(Run))
        events = session.scalar(select(func.count()).select_from(Event))
        return int(runs or 0), int(events or 0)


def post_raw(client: TestClient, url: str, text: str, auth: dict[str, str]) -> object:
    return client.post(url, content=text.encode(), headers={**auth, "content-type": "application/json"})


def assert_refused(response: object) -> None:
    status = getattr(response, "status_code", None)
    assert status == 422, getattr(response, "text", response)
    body = response.json()  # type: ignore[attr-defined]
    assert body["error"] == "validation_error", body
    assert isinstance(body["detail"], str) and body["errors"], body


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_run_payload__422_nothing_stored(client: TestClient, actors: Actors, name: str) -> None:
    before = counts()
    text = f'{{"workflow": "api.ask_any", "payload": {BAD_VALUES[name]}, "target": "{TARGET}"}}'
    assert_refused(post_raw(client, "/v1/runs", text, actors.auth(AGENT)))
    assert counts() == before


@pytest.mark.parametrize(
    "field",
    ['"workflow": "api.ask\\u0000any", "payload": {}, "target": "team:ops"',
     '"workflow": "api.ask_any", "payload": {}, "target": "team:\\u0000ops"',
     '"workflow": "api.ask_any", "payload": {}, "target": "team:\\ud800"'],
)  # fmt: skip
def test_run_strings__nul_or_surrogate_is_422_nothing_stored(client: TestClient, actors: Actors, field: str) -> None:
    before = counts()
    assert_refused(post_raw(client, "/v1/runs", "{" + field + "}", actors.auth(AGENT)))
    assert counts() == before


def test_idempotency_key_and_query__nul_is_422(client: TestClient, actors: Actors) -> None:
    before = counts()
    body = {"workflow": "api.ask_any", "payload": {}, "target": TARGET}
    headers = {**actors.auth(AGENT), "Idempotency-Key": "k\u00e9\u00ff".encode("latin-1")}  # type: ignore[dict-item]
    made = client.post("/v1/runs", json=body, headers=headers).status_code
    assert made == 201
    assert_refused(client.get("/v1/interactions", params={"target": "a\x00b"}, headers=actors.auth(HUMAN)))
    assert_refused(client.get("/v1/interactions", params={"x\x00": "1"}, headers=actors.auth(HUMAN)))
    assert counts()[0] == before[0] + 1


# Routes outside the OpenAPI document (the pages, the docs), with the OpenAPI's operations below.
UNDOCUMENTED = [("get", "/decisions"), ("post", "/decisions/login"), ("get", "/runs"), ("get", "/runs/{run_id}"),
                ("get", "/docs")]  # fmt: skip


def test_every_route__a_nul_in_the_query_is_422_before_the_route_runs(client: TestClient, actors: Actors) -> None:
    # The check is each route's (api.input.CheckedRoute), so a router made without it would slip through.
    operations = [(method, path) for path, ops in client.app.openapi()["paths"].items() for method in ops]  # type: ignore[attr-defined]
    assert len(operations) > 15
    for method, path in operations + UNDOCUMENTED:
        url = re.sub(r"\{[a-z_]+\}", "x1", path)
        response = client.request(method, url, params={"probe": "a\x00b"}, headers=actors.auth(ADMIN))
        assert_refused(response)
        assert "query.probe: contains a NUL character" in response.json()["errors"], (method, path)


@pytest.fixture(scope="module")
def pending(client: TestClient, actors: Actors) -> str:
    made = client.post(
        "/v1/runs", json={"workflow": "api.ask_any", "payload": {}, "target": TARGET}, headers=actors.auth(AGENT)
    )
    assert made.status_code == 201, made.text
    drive(made.json()["id"])
    return interactions(made.json()["id"])["any"].id


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_answer_value__422_the_interaction_stays_pending(
    client: TestClient, actors: Actors, pending: str, name: str
) -> None:
    before = counts()
    text = f'{{"response_id": "r-{uuid.uuid4().hex}", "value": {BAD_VALUES[name]}}}'
    assert_refused(post_raw(client, f"/v1/interactions/{pending}/answer", text, actors.auth(HUMAN)))
    assert counts() == before
    row = next(iter(interactions_of(pending)))
    assert (row.status, row.value, row.response_id) == ("pending", None, None)


def interactions_of(iid: str) -> list[object]:
    from models.tables import Interaction

    with transaction() as session:
        return [session.get_one(Interaction, iid)]


def test_bad_answers_first__then_a_valid_answer_wins(client: TestClient, actors: Actors, pending: str) -> None:
    rid = f"r-{uuid.uuid4().hex}"
    url = f"/v1/interactions/{pending}/answer"
    assert_refused(post_raw(client, url, f'{{"response_id": "{rid}", "value": NaN}}', actors.auth(HUMAN)))
    won = client.post(url, json={"response_id": rid, "value": {"ok": 1.5}}, headers=actors.auth(HUMAN))
    assert won.status_code == 200, won.text


def test_broken_json__the_message_says_where_parsing_stopped(client: TestClient, actors: Actors, pending: str) -> None:
    url = f"/v1/interactions/{pending}/answer"
    refused = post_raw(client, url, '{"response_id": "r-1", "value": "ok",}', actors.auth(HUMAN))
    assert_refused(refused)
    detail = refused.json()["detail"]  # type: ignore[attr-defined]
    assert "body: not valid JSON at character 37" in detail, detail


def test_a_form_body__the_message_asks_for_json(client: TestClient, actors: Actors, pending: str) -> None:
    # As `curl -d '…'` without `-H 'Content-Type: application/json'` sends it
    form = {"content-type": "application/x-www-form-urlencoded"}
    body = b'{"response_id": "r-1", "value": "ok"}'
    refused = client.post(f"/v1/interactions/{pending}/answer", content=body, headers={**actors.auth(HUMAN), **form})
    assert_refused(refused)
    assert refused.json()["errors"][0] == (
        "body: sent as application/x-www-form-urlencoded; send Content-Type: application/json"
    ), refused.json()


def test_an_unauthenticated_bad_body_is_still_401(client: TestClient) -> None:
    text = f'{{"workflow": "api.ask_any", "payload": NaN, "target": "{TARGET}"}}'
    refused = post_raw(client, "/v1/runs", text, {"Authorization": "Bearer nope"})
    assert refused.status_code == 401  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the SDK refuses the same


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_sdk_start_run__invalid_input_nothing_stored(client: TestClient, name: str) -> None:
    from tasks.sdk import start_run

    payload = value_of(name)
    before = counts()
    with pytest.raises(InvalidInput) as refused:
        start_run("api.ask_any", payload, principal=AGENT, target=TARGET)
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, ParkwayError)
    with pytest.raises(InvalidInput):
        start_run("api.ask_any", {}, principal=AGENT, target="team:\x00ops")
    assert counts() == before


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_sdk_answer__invalid_answer_stays_pending(client: TestClient, actors: Actors, name: str) -> None:
    from api.errors import outcome_status
    from tasks.sdk import answer

    made = client.post(
        "/v1/runs", json={"workflow": "api.ask_any", "payload": {}, "target": TARGET}, headers=actors.auth(AGENT)
    )
    drive(made.json()["id"])
    iid = interactions(made.json()["id"])["any"].id
    with pytest.raises(InvalidAnswer) as refused:
        answer(iid, value_of(name), response_id=f"r-{uuid.uuid4().hex}", principal=HUMAN)
    assert outcome_status(refused.value) == 422
    assert interactions(made.json()["id"])["any"].status == "pending"


# --------------------------------------------------------------------------- the Decisions page's forms


@pytest.mark.parametrize("raw", ["NaN", "1e400", '"\\ud800"', '"\\u0000"', "[" * 100 + "]" * 100])
def test_form_json_field__refused_as_a_form_error(raw: str) -> None:
    root = forms.fields_for({"type": "array"})  # a JSON textarea
    with pytest.raises(forms.FormError):
        forms.value_from(root, {"value": raw})
    with pytest.raises(forms.FormError):
        forms.value_from(forms.fields_for({"type": "string"}), {"value": "a\x00b"})


# --------------------------------------------------------------------------- headers over real HTTP


def test_last_event_id__a_non_ascii_digit_is_ignored_not_a_500(server: ApiServer, actors: Actors) -> None:
    """``Last-Event-ID: \\xb2`` reads (latin-1) as "²", which ``str.isdigit`` accepts and ``int`` refuses. Sent
    on a raw socket: the test client does not deliver such a header byte as a real server does."""
    for path in ("/v1/events/stream", "/decisions/stream"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            token = actors.tokens[HUMAN].encode()
            sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token
                         + b"\r\nLast-Event-ID: \xb2\r\n\r\n")  # fmt: skip
            status = sock.recv(64).split(b"\r\n", 1)[0]
        assert not status.startswith(b"HTTP/1.1 5"), (path, status)
    assert "Traceback" not in server.text()
