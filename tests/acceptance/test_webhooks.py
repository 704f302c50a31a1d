"""Webhook deliveries end to end: a real worker subprocess sends a run's events to a receiver started by the
test, which verifies every request with the ``standardwebhooks`` package (the specification's own library)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from models.tables import Event
from models.webhook_tables import Webhook
from parkway.db import transaction
from tests.acceptance.webhook_receiver import DROP, IMPORTS, OTP, SLEEP, Receiver, login_run, run_events, subscribe
from tests.support import Stack, wait_for

PUBLIC = "https://parkway.example.test"  # PARKWAY_PUBLIC_URL: the links a delivery carries start with it


@pytest.fixture(scope="module")
def worker(stack: Stack):  # type: ignore[no-untyped-def]
    # Seven attempts: enough for the first test's receiver to fail five times in five ways
    return stack.start_worker(
        PARKWAY_IMPORTS=IMPORTS, PARKWAY_WEBHOOK_RETRY_S="0.2,0.2,0.5,0.5,1,1", PARKWAY_PUBLIC_URL=PUBLIC
    )


def test_deliveries__a_run_in_seq_order_signed_retried_with_the_same_ids(
    stack: Stack, worker: Any, client: TestClient, receiver: Receiver
) -> None:
    # Given a subscription whose receiver is down (no answer), answers 500 twice, then 429 with Retry-After,
    # then answers only after PARKWAY_WEBHOOK_TIMEOUT_S (2 s), then recovers
    receiver.script = [(DROP, {}), (500, {}), (500, {}), (429, {"retry-after": "1"}), (204, {SLEEP: "3"})]
    hook = subscribe(client, receiver, targets=["team:ops"])

    # When a run asks a question with a sensitive field, is answered and completes
    run_id = login_run()
    expected = run_events(run_id)
    assert "interaction.asked" in [t for _, t in expected] and expected[-1][1] == "run.completed"

    # Then every event of the run reaches the receiver, answered 2xx, in seq order
    wait_for(lambda: receiver.of_run(run_id) == expected, sweep=True, timeout=60, what="every event delivered")
    assert receiver.unverified == 0

    # And a retry carries the id of its first attempt: every webhook-id names one event, every event one id
    assert receiver.ids_name_one_event_each()
    assert [r["status"] for r in receiver.got[:5]] == [DROP, 500, 500, 429, 204]
    assert len({r["id"] for r in receiver.got[:6]}) == 1  # the same event until it got through

    # And the question carries what a chat message needs; no body carries the sensitive value
    bodies = [b for b in receiver.delivered() if b["data"]["run_id"] == run_id]
    asked = next(b for b in bodies if b["type"] == "interaction.asked")["data"]["interaction"]
    assert asked["prompt"] == "Your code?" and asked["target"] == "team:ops" and asked["kind"] == "question"
    assert asked["schema"]["required"] == ["user", "otp"] and asked["link"] == f"{PUBLIC}/decisions"
    assert all(OTP.encode() not in r["raw"] for r in receiver.got)

    # And the delivery log shows the failed attempts and their retries
    log = client.get(f"/v1/webhooks/{hook['id']}/deliveries?limit=200").json()["items"]
    failed = sorted((d for d in log if d["error"]), key=lambda d: d["attempt"])
    assert [(d["status_code"], d["attempt"]) for d in failed] == [(None, 1), (500, 2), (500, 3), (429, 4), (None, 5)]
    assert "timed out" in failed[-1]["error"]
    assert all(d["next_attempt_at"] is not None and d["error"] for d in failed)
    assert client.get(f"/v1/webhooks/{hook['id']}").json()["status"] == "active"


def test_deliveries__410_disables_and_the_last_retry_marks_failing(
    stack: Stack, worker: Any, client: TestClient, receiver: Receiver
) -> None:
    # Given one receiver answering 410 to everything, and one answering 500 to everything
    receiver.script = [(410, {})] * 100
    gone = subscribe(client, receiver, events=["run.completed"])
    failing_receiver = Receiver(script=[(500, {})] * 100).start()
    failing = subscribe(client, failing_receiver, events=["run.completed"])

    # When a run completes
    run_id = login_run()

    # Then the first subscription is disabled after one attempt
    def status(hook_id: str) -> str:
        with transaction() as session:
            row = session.get(Webhook, hook_id)
            assert row is not None
            return row.status

    wait_for(lambda: status(gone["id"]) == "disabled", sweep=True, timeout=60, what="disabled on 410")
    assert len(receiver.got) == 1
    shown = client.get(f"/v1/webhooks/{gone['id']}").json()
    assert shown["status"] == "disabled" and "410" in shown["reason"]

    # And the other is failing after the schedule's retries (PARKWAY_WEBHOOK_RETRY_S: 6 delays, 7 attempts)
    wait_for(lambda: status(failing["id"]) == "failing", sweep=True, timeout=60, what="failing after the last retry")
    assert [r["status"] for r in failing_receiver.got] == [500] * 7
    assert "500" in client.get(f"/v1/webhooks/{failing['id']}").json()["reason"]
    # And the run whose event could not be delivered says so in its log, once, for the failing one only
    with transaction() as session:
        written = session.scalars(select(Event).where(Event.run_id == run_id, Event.type == "webhook.failing")).all()
        mine = [e for e in written if e.data["webhook_id"] in (gone["id"], failing["id"])]  # not earlier tests'
        assert [(e.data["webhook_id"], e.data["reason"]) for e in mine] == [
            (failing["id"], "the receiver answered 500")
        ]

    # When it is re-enabled and its receiver recovers, it resumes from the event where it stopped
    failing_receiver.script = []
    assert client.patch(f"/v1/webhooks/{failing['id']}", json={"enabled": True}).status_code == 200
    wait_for(lambda: failing_receiver.delivered(), sweep=True, timeout=60, what="delivered after re-enabling")
    assert failing_receiver.got[-1]["id"] == failing_receiver.got[0]["id"]
    failing_receiver.stop()


def test_rotation_and_replay__both_secrets_sign_the_overlap_and_a_replay_repeats_the_same_ids(
    stack: Stack, worker: Any, client: TestClient, receiver: Receiver
) -> None:
    # Given a subscription whose secret is rotated with an overlap: the receiver checks every request
    # against the old secret and the new one
    hook = subscribe(client, receiver, events=["run.*"], targets=["team:ops"])
    old = receiver.secret
    rotated = client.post(f"/v1/webhooks/{hook['id']}/secret", json={"overlap_s": 3600})
    assert rotated.status_code == 201 and rotated.json()["secret"] not in (old, None)
    receiver.secret, receiver.also = rotated.json()["secret"], [old]

    # When a run completes, its run events arrive, each verifying with either secret
    run_id = login_run()
    expected = [(seq, kind) for seq, kind in run_events(run_id) if kind.startswith("run.")]
    wait_for(lambda: receiver.of_run(run_id) == expected, sweep=True, timeout=60, what="the run's events")
    assert receiver.unverified == 0
    first_ids = [r["id"] for r in receiver.got]
    # (the cursor moves on once a batch is answered, so the receiver may see the events before it does)
    wait_for(lambda: client.get(f"/v1/webhooks/{hook['id']}").json()["cursor"] >= expected[-1][0],
             what="the cursor past the run's events")  # fmt: skip

    # When they are replayed from before the first, they come again with the ids they had
    replayed = client.post(f"/v1/webhooks/{hook['id']}/replay", json={"after_seq": expected[0][0] - 1})
    assert replayed.status_code == 202 and replayed.json()["cursor"] == expected[0][0] - 1
    wait_for(lambda: len(receiver.got) >= 2 * len(first_ids), sweep=True, timeout=60, what="the replay")
    assert [r["id"] for r in receiver.got] == first_ids + first_ids
    assert receiver.ids_name_one_event_each() and receiver.unverified == 0

    # And a replay forward of the cursor is refused
    ahead = client.post(f"/v1/webhooks/{hook['id']}/replay", json={"after_seq": 2**62})
    assert ahead.status_code == 422
