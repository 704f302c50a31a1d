"""Answer and cancel outcomes over HTTP: 200, exact retry, 409, 410, 422 — and redaction."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event

from beat.sweep import run_sweep
from parkway.db import get_engine
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, drive
from tests.support import TARGET, event_types, interactions, pass_time


def start_parked(client: TestClient, actors: Actors, workflow: str, payload: Any = None) -> str:
    body = {"workflow": workflow, "payload": payload or {}, "target": TARGET}
    made = client.post("/v1/runs", json=body, headers=actors.auth(AGENT))
    assert made.status_code == 201, made.text
    drive(made.json()["id"])
    return str(made.json()["id"])


def answer(client: TestClient, actors: Actors, iid: str, value: Any, response_id: str, by: str = HUMAN) -> Any:
    return client.post(
        f"/v1/interactions/{iid}/answer",
        json={"response_id": response_id, "value": value},
        headers=actors.auth(by),
    )


def cancel(
    client: TestClient, actors: Actors, iid: str, response_id: str, reason: str | None = None, by: str = HUMAN
) -> Any:
    return client.post(
        f"/v1/interactions/{iid}/cancel",
        json={"response_id": response_id, "reason": reason},
        headers=actors.auth(by),
    )


def test_exact_retry__is_the_same_principals_another_one_sending_it_gets_409(
    client: TestClient, actors: Actors
) -> None:
    admin = actors.auth(ADMIN)
    grant = client.post("/v1/grants", json={"principal": ADMIN, "target": TARGET}, headers=admin).json()
    try:
        asked = interactions(start_parked(client, actors, "t.ask_two"))
        assert answer(client, actors, asked["window"].id, "now", "mine").status_code == 200
        # Another principal granted on the target, sending the same response id and value: not a retry
        copied = answer(client, actors, asked["window"].id, "now", "mine", by=ADMIN)
        assert copied.status_code == 409, copied.text
        assert copied.json()["detail"].endswith("by another response")
        # The same principal's response id with another value: a conflict that says so
        changed = answer(client, actors, asked["window"].id, "later", "mine")
        assert changed.status_code == 409 and "by response mine with another value" in changed.json()["detail"]
        assert cancel(client, actors, asked["reason"].id, "stop").status_code == 200
        assert cancel(client, actors, asked["reason"].id, "stop", by=ADMIN).status_code == 410
        assert cancel(client, actors, asked["reason"].id, "stop").status_code == 200  # the canceller's retry
    finally:
        assert client.delete(f"/v1/grants/{grant['id']}", headers=admin).status_code == 204


def test_answer__200_then_exact_retry_same_receipt_then_others_409(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_two")
    iid = interactions(run_id)["window"].id
    first = answer(client, actors, iid, "now", "r-1")
    assert first.status_code == 200
    receipt = first.json()
    assert receipt["status"] == "answered" and receipt["response_id"] == "r-1"
    assert receipt["answered_at"].endswith("Z")
    # An exact retry gets the same receipt
    again = answer(client, actors, iid, "now", "r-1")
    assert again.status_code == 200 and again.json() == receipt
    # Another response id, or the same id with another value: 409 with the authoritative state
    for value, response_id in (("tonight", "r-2"), ("tonight", "r-1"), ("now", "r-2")):
        lost = answer(client, actors, iid, value, response_id)
        assert lost.status_code == 409, lost.text
        body = lost.json()
        assert body["error"] == "conflict"
        assert body["state"]["id"] == iid
        assert body["state"]["status"] == "answered"
        assert body["state"]["answered_by"] == HUMAN
        assert body["state"]["value"] == "now"
        assert body["state"]["run_status"] == "waiting"
    assert interactions(run_id)["window"].value == "now"


def test_exact_retry__same_receipt_after_the_run_ended(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_one")
    iid = interactions(run_id)["go"].id
    receipt = answer(client, actors, iid, "yes", "once").json()
    drive(run_id)
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert run["status"] == "completed" and run["result"] == {"go": "yes"}
    assert run["completed_at"] is not None and run["interactions"] == []
    late = answer(client, actors, iid, "yes", "once")
    assert late.status_code == 200 and late.json() == receipt
    assert answer(client, actors, iid, "no", "other").status_code == 409


def test_cancel__ends_the_step_and_run_then_siblings_are_410(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_two")
    asked = interactions(run_id)
    canceled = cancel(client, actors, asked["window"].id, "c-1", reason="not today")
    assert canceled.status_code == 200, canceled.text
    receipt = canceled.json()
    assert receipt["status"] == "canceled" and receipt["response_id"] == "c-1" and receipt["canceled_at"]
    # Exact retry of the cancel: the same receipt
    assert cancel(client, actors, asked["window"].id, "c-1", reason="not today").json() == receipt
    # The sibling cannot be answered: 410 with the interaction and the run's status
    gone = answer(client, actors, asked["reason"].id, "because", "late")
    assert gone.status_code == 410
    body = gone.json()
    assert body["error"] == "gone"
    assert body["state"]["id"] == asked["reason"].id
    assert body["state"]["status"] == "canceled"
    assert body["state"]["run_status"] == "canceled"
    # Nor canceled again by another response
    assert cancel(client, actors, asked["reason"].id, "c-2").status_code == 410
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    assert run["status"] == "canceled" and run["reason"] == "not today" and run["interactions"] == []
    assert [s["status"] for s in run["steps"]] == ["canceled"]
    types = event_types(run_id)
    assert types.count("interaction.canceled") == 2 and types.count("run.canceled") == 1


def test_cancel_after_an_answer_won__409(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_two")
    iid = interactions(run_id)["window"].id
    assert answer(client, actors, iid, "now", "a").status_code == 200
    refused = cancel(client, actors, iid, "c")
    assert refused.status_code == 409 and refused.json()["state"]["status"] == "answered"


def test_answer_after_expiry__410(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_two", {"expires_in": 60})
    iid = interactions(run_id)["window"].id
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(HUMAN)).json()["expires_at"].endswith("Z")
    pass_time(120)
    early = answer(client, actors, iid, "now", "before-the-sweep")  # past its deadline, not yet recorded
    assert early.status_code == 410 and early.json()["state"]["status"] == "expired", early.text
    run_sweep()
    gone = answer(client, actors, iid, "now", "too-late")
    assert gone.status_code == 410
    assert gone.json()["state"]["status"] == "expired"
    assert gone.json()["state"]["run_status"] == "waiting"  # the sibling is still open


def test_invalid_value__422_nothing_stored_then_a_valid_answer_wins(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_two")
    iid = interactions(run_id)["window"].id
    events_before = event_types(run_id)
    refused = answer(client, actors, iid, "someday", "bad")
    assert refused.status_code == 422
    body = refused.json()
    assert body["error"] == "invalid_answer"
    assert "schema" in body["detail"] and body["errors"]
    row = interactions(run_id)["window"]
    assert (row.status, row.value, row.response_id) == ("pending", None, None)
    assert event_types(run_id) == events_before
    # The same response id with a valid value is a first response, and wins
    won = answer(client, actors, iid, "tonight", "bad")
    assert won.status_code == 200 and won.json()["status"] == "answered"


def test_malformed_answer_body__422_in_the_error_shape(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.ask_one")
    iid = interactions(run_id)["go"].id
    for body in ({"value": "x"}, {"response_id": "", "value": "x"}, {"response_id": "x"}, [1, 2]):
        response = client.post(f"/v1/interactions/{iid}/answer", json=body, headers=actors.auth(HUMAN))
        assert response.status_code == 422, body
        assert response.json()["error"] == "validation_error"
        assert isinstance(response.json()["detail"], str) and response.json()["errors"]
    assert interactions(run_id)["go"].status == "pending"


def test_an_answer_by_token__reads_its_principal_in_the_answers_first_statement_not_a_round_trip_of_its_own(
    client: TestClient, actors: Actors
) -> None:
    # Given a parked wait, and what the API's thread pool (where an answer runs) takes from the pool and sends
    iid = interactions(start_parked(client, actors, "t.ask_one"))["go"].id
    checkouts: list[str] = []
    statements: list[str] = []

    def checkout(*_: Any) -> None:
        if threading.current_thread().name.startswith("parkway-api"):
            checkouts.append(threading.current_thread().name)

    def sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if threading.current_thread().name.startswith("parkway-api"):
            statements.append(statement)

    engine = get_engine()
    event.listen(engine, "checkout", checkout)
    event.listen(engine, "before_cursor_execute", sent)
    try:
        # When a human answers it over HTTP with its token
        answered = answer(client, actors, iid, "yes", "by-token")
    finally:
        event.remove(engine, "before_cursor_execute", sent)
        event.remove(engine, "checkout", checkout)
    # Then the answer is made on one connection, and no statement of its own read the principal by its token
    assert answered.status_code == 200 and answered.json()["status"] == "answered", answered.text
    assert len(checkouts) == 1, checkouts
    assert not [s for s in statements if "token_hash" in s], statements


def test_permission__denied_is_rejected(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "t.permission", {"cmd": f"rm {uuid.uuid4().hex}"})
    iid = interactions(run_id)["shell"].id
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(HUMAN)).json()
    assert read["kind"] == "permission" and read["action"] == "shell.exec" and len(read["resources"]) == 1
    assert answer(client, actors, iid, {"approved": "yes"}, "p").status_code == 422
    receipt = answer(client, actors, iid, {"approved": False}, "p")
    assert receipt.json()["status"] == "rejected"
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(HUMAN)).json()["value"] == {"approved": False}


def test_sensitive_fields__always_redacted_in_reads_and_conflicts(client: TestClient, actors: Actors) -> None:
    run_id = start_parked(client, actors, "api.login")
    iid = interactions(run_id)["otp"].id
    pending = client.get(f"/v1/interactions/{iid}", headers=actors.auth(HUMAN)).json()
    assert pending["value"] is None and pending["sensitive"] == ["otp"]
    assert answer(client, actors, iid, {"user": "ana", "otp": "314159"}, "s").status_code == 200
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(HUMAN))
    assert read.json()["value"] == {"user": "ana", "otp": "***"}
    conflict = answer(client, actors, iid, {"user": "eve", "otp": "000000"}, "other")
    assert conflict.status_code == 409 and conflict.json()["state"]["value"] == {"user": "ana", "otp": "***"}
    listed = client.get("/v1/interactions", params={"run_id": run_id}, headers=actors.auth(HUMAN))
    events = client.get(f"/v1/runs/{run_id}/events", headers=actors.auth(HUMAN))
    drive(run_id)
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN))
    assert run.json()["status"] == "completed"
    for text in (read.text, conflict.text, listed.text, events.text, run.text):
        assert "314159" not in text
