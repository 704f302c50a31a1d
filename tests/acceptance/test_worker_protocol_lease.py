"""A completion that also leases the next items (``lease`` in ``POST /v1/worker/leases/{id}/complete``,
docs/worker-protocol.md): a busy remote worker makes one request per item, with the completion's guarantees
unchanged. Real uvicorn, real Celery worker, the remote worker driven with httpx."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

from tests.acceptance.protocol_support import SERVES, Proto, receipts
from tests.support import continuations, run_row, wait_for


def statuses(*run_ids: str) -> list[str]:
    """The status of each run's latest continuation."""
    return [continuations(run_id)[-1].status for run_id in run_ids]


def give_back(proto: Proto, items: list[Any], keep: str) -> dict[str, Any]:
    """The item of run ``keep``; every other one (due work of earlier tests) released."""
    for item in items:
        if item["run_id"] != keep:
            assert proto.release(item["lease_id"]).status_code == 200
    return next(item for item in items if item["run_id"] == keep)


def test_completion_with_lease__answer_carries_the_next_item__its_exact_retry_the_same_receipt_and_none(
    proto: Proto,
) -> None:
    # Given two due resumes: the first leased, the second waiting.
    first_run, second_run = proto.due(), proto.due()
    first = proto.lease_one(first_run)
    # When the first completes and asks for the next items.
    done = proto.complete(first["lease_id"], {"type": "complete", "result": "one"}, lease={"max": 100})
    assert done.status_code == 200, done.text
    # Then its answer is the receipt and the second item, under a lease of its own.
    body = done.json()
    assert (body["lease_id"], body["outcome"], body["run_status"]) == (first["lease_id"], "complete", "completed")
    second = give_back(proto, body["items"], keep=second_run)
    assert (second["kind"], second["key"], second["attempt"]) == ("resume", "proto.decide@1", 1)
    assert second["answers"]["otp"]["value"] == {"code": "123456", "note": "ok"}  # unsealed, as a lease call's
    assert statuses(second_run) == ["claimed"]
    # The exact retry (its answer was lost, say): the same receipt, and no second batch.
    again = proto.complete(first["lease_id"], {"type": "complete", "result": "one"}, lease={"max": 100})
    assert again.status_code == 200, again.text
    assert again.json() == {**body, "items": []}
    assert statuses(second_run) == ["claimed"] and receipts(first_run) == 1
    # The item handed out is a real lease: its completion commits.
    assert proto.complete(second["lease_id"], {"type": "complete", "result": "two"}).status_code == 200
    assert (run_row(first_run).result, run_row(second_run).result, receipts(second_run)) == ("one", "two", 1)


def test_refused_completion_with_lease__409_410_422__leases_nothing(proto: Proto) -> None:
    # Given a lease that ran out and was taken by another (its run then completed), an item completed
    # already, one still held, and a due resume nobody holds.
    ended_run = proto.due()
    lost = proto.lease_one(ended_run, lease_s=5)
    winner = proto.lease_one(ended_run, wait_s=20)  # leased again once the first lease ran out
    assert proto.complete(winner["lease_id"], {"type": "complete"}).status_code == 200
    done_run, held_run = proto.due(), proto.due()
    done = proto.lease_one(done_run)
    assert proto.complete(done["lease_id"], {"type": "complete"}).status_code == 200
    held = proto.lease_one(held_run)
    waiting_run = proto.due()
    asks = {"max": 100}
    # When each completes asking for the next items, and is refused.
    gone = proto.complete(lost["lease_id"], {"type": "complete"}, lease=asks)
    other = proto.complete(done["lease_id"], {"type": "fail", "error": "another outcome"}, lease=asks)
    invalid = proto.complete(held["lease_id"], {"type": "fail", "error": ""}, lease=asks)
    # Then nothing is leased: the waiting resume is still ready, the held one still held by its lease.
    assert (gone.status_code, other.status_code, invalid.status_code) == (410, 409, 422), (gone.text, other.text)
    assert "items" not in gone.json() and "items" not in other.json() and "items" not in invalid.json()
    assert statuses(waiting_run, held_run) == ["ready", "claimed"]
    assert proto.complete(held["lease_id"], {"type": "complete"}).status_code == 200
    assert proto.lease_one(waiting_run)["attempt"] == 1


LEASE_CALLS = re.compile(
    r'^parkway_http_request_duration_seconds_count\{method="POST",route="/v1/worker/lease",status="200"\} (\S+)$', re.M
)


def lease_calls_answered(proto: Proto) -> float:
    """Lease calls the API has finished (its request metric's count)."""
    found = LEASE_CALLS.search(proto.http.get("/metrics").text)
    return float(found.group(1)) if found else 0.0


def abandoned_long_poll(proto: Proto, worker: str) -> None:
    """A long poll for what the proto worker serves, its connection closed once the API has taken it (the
    poll's first look advertised ``worker``), as by an agent that was stopped while it waited."""
    body = json.dumps({"worker": worker, "serves": SERVES, "max": 100, "wait_s": 30, "lease_s": 60}).encode()
    head = (f"POST /v1/worker/lease HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {proto.tokens['worker']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
    url = proto.http.base_url
    with socket.create_connection((url.host, url.port)) as sock:
        sock.sendall(head.encode() + body)
        wait_for(lambda: worker in proto.call("GET", "/v1/workers", "admin").text, what="the poll to be taken")


def test_a_long_poll_whose_worker_is_gone_ends_and_leases_nothing(proto: Proto) -> None:
    # Given a long poll (30 s) whose worker hung up while it waited
    before = lease_calls_answered(proto)
    abandoned_long_poll(proto, "gone-agent")
    # Then the API stops it, long before its 30 s (what it would lease would reach no one)
    wait_for(lambda: lease_calls_answered(proto) > before, timeout=10, what="the abandoned long poll to end")
    # And a resume that falls due after that goes to the next lease call
    run_id = proto.due()
    items = proto.lease(wait_s=5, n=100)
    assert run_id in [item["run_id"] for item in items]
    for item in items:
        assert proto.release(item["lease_id"]).status_code == 200
