"""The answer route served plainly (``api.routes.interactions._answer_plainly``) answers exactly as FastAPI's
route for the same endpoint: the same status, headers and bytes, for a receipt and for every refusal.

A body sent as ``application/json`` is the plain handler's to read; the same body as ``application/x-answer+json``
(which FastAPI reads as JSON too) is FastAPI's, so each request below is made both ways and compared."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi.testclient import TestClient
from starlette.requests import Request

from api.errors import ApiError
from api.routes.interactions import _answer_plainly
from tests.api.conftest import AGENT, HUMAN, Actors
from tests.api.test_answers import cancel, start_parked
from tests.support import interactions

PLAIN, ROUTED = "application/json", "application/x-answer+json"


def post(client: TestClient, iid: str, body: Any, content_type: str, headers: dict[str, str]) -> Any:
    return client.post(
        f"/v1/interactions/{iid}/answer",
        content=json.dumps(body).encode(),
        headers={**headers, "content-type": content_type},
    )


def same_both_ways(client: TestClient, iid: str, body: Any, headers: dict[str, str]) -> Any:
    """The response to ``body`` sent plainly, checked identical to the one FastAPI's route gives."""
    plain, routed = (post(client, iid, body, kind, headers) for kind in (PLAIN, ROUTED))
    assert (plain.status_code, plain.content) == (routed.status_code, routed.content), (plain.text, routed.text)
    assert {k: v for k, v in plain.headers.items() if k != "date"} == {
        k: v for k, v in routed.headers.items() if k != "date"
    }
    return plain


def test_a_receipt_and_its_retry__the_same_bytes_either_way(client: TestClient, actors: Actors) -> None:
    asked = interactions(start_parked(client, actors, "t.ask_two"))
    for first, retry, key in ((PLAIN, ROUTED, "window"), (ROUTED, PLAIN, "reason")):
        body = {"response_id": f"r-{key}", "value": "now" if key == "window" else "because"}
        answered = post(client, asked[key].id, body, first, actors.auth(HUMAN))
        assert answered.status_code == 200 and answered.json()["status"] == "answered", answered.text
        again = post(client, asked[key].id, body, retry, actors.auth(HUMAN))
        assert (again.status_code, again.content) == (200, answered.content)
        assert again.headers["content-type"] == answered.headers["content-type"] == "application/json"
        assert again.headers["content-length"] == answered.headers["content-length"]


def test_every_refusal__the_same_either_way(client: TestClient, actors: Actors) -> None:
    asked = interactions(start_parked(client, actors, "t.ask_two"))
    window, reason = asked["window"].id, asked["reason"].id
    human, agent = actors.auth(HUMAN), actors.auth(AGENT)
    valid = {"response_id": "x", "value": "now"}
    cases: list[tuple[str, Any, dict[str, str], int]] = [
        (window, valid, {}, 401),  # no token
        (window, valid, {"Authorization": "Bearer pk_nobody"}, 401),
        (window, valid, {"Authorization": "Basic abc"}, 401),  # not a bearer token
        (window, valid, {"Authorization": "Bearer   "}, 401),
        (window, valid, {"Authorization": "bearer  pk_nobody "}, 401),
        (window, valid, agent, 403),
        ("i" * 64, valid, human, 404),
        ("i" * 65, valid, human, 422),  # not an id: FastAPI's
        (window, {"response_id": "x", "value": "someday"}, human, 422),  # not in the schema: the store's
        (window, {"value": "now"}, human, 422),  # not an answer: FastAPI's
        (window, {**valid, "owner": "me"}, human, 422),
        (window, [1, 2], human, 422),
        (window, "now", human, 422),
    ]
    for iid, body, headers, status in cases:
        assert same_both_ways(client, iid, body, headers).status_code == status, (iid, body, headers)
    assert post(client, window, {"response_id": "won", "value": "now"}, PLAIN, human).status_code == 200
    lost = same_both_ways(client, window, {"response_id": "lost", "value": "now"}, human)
    assert lost.status_code == 409 and lost.json()["state"]["run_status"] == "waiting"
    assert cancel(client, actors, reason, "stop").status_code == 200
    assert same_both_ways(client, reason, {"response_id": "late", "value": "now"}, human).status_code == 410


def request(iid: str, body: bytes, content_type: str | None, token: str | None) -> Request:
    headers = [(b"content-type", content_type.encode())] if content_type else []
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return sent.pop() if sent else {"type": "http.disconnect"}

    scope = {"type": "http", "method": "POST", "path": f"/v1/interactions/{iid}/answer", "headers": headers,
             "query_string": b"", "path_params": {"interaction_id": iid}}  # fmt: skip
    return Request(scope, receive)


def test_what_the_plain_handler_takes__and_what_it_leaves_to_fastapi(actors: Actors) -> None:
    valid = json.dumps({"response_id": "x", "value": "now"}).encode()
    declined = [
        request("i" * 65, valid, PLAIN, "t"),  # not an id
        request("i" * 64, valid, ROUTED, "t"),  # JSON of another type
        request("i" * 64, valid, None, "t"),  # no type: FastAPI refuses it
        request("i" * 64, b"{", PLAIN, "t"),  # not JSON
        request("i" * 64, b"[" * 5000 + b"]" * 5000, PLAIN, "t"),  # past the parser's depth
        request("i" * 64, b"", PLAIN, "t"),
        request("i" * 64, b'{"value": 1}', PLAIN, "t"),  # not an answer
    ]
    for made in declined:
        assert asyncio.run(_answer_plainly(made)) is None, made.scope
    # A request it can read is answered by it: here, a token nobody holds is the API's 401 (the store's verdict)
    taken = request("i" * 64, valid, "Application/JSON; charset=utf-8", "pk_nobody")
    try:
        asyncio.run(_answer_plainly(taken))
    except ApiError as exc:
        assert exc.status_code == 401
    else:  # pragma: no cover - the assertion's message
        raise AssertionError("the plain handler left a request it can read to FastAPI")
