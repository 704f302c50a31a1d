"""Nothing a subscription matches is lost when the worker delivering it is SIGKILLed mid-request and the
broker loses every queued message: the cursor is in the database, and the sweep drives the subscription
again once the dead attempt's lease has run out. The repeat carries the same webhook-id."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tasks.sdk import answer
from tests.acceptance.webhook_receiver import IMPORTS, Receiver, run_events, subscribe
from tests.support import HUMAN, Stack, new_response_id, start, wait_for, wait_parked, wait_status


def test_deliveries__a_worker_killed_mid_request_and_a_flushed_broker_lose_nothing(
    stack: Stack, own_workers: None, client: TestClient, receiver: Receiver
) -> None:
    # Given a subscription whose receiver holds the first request open
    subscribe(client, receiver, targets=["team:ops"])
    receiver.held.set()
    first = stack.start_worker(PARKWAY_IMPORTS=IMPORTS)

    # When a run starts, and the worker is SIGKILLed while its first event is being delivered
    run_id = start("wh.login")
    wait_for(receiver.arrived.is_set, sweep=True, timeout=60, what="a delivery in flight")
    first.kill()
    # And the broker loses every queued message
    stack.flush_broker()
    receiver.held.clear()  # the request the dead worker made is answered now, to no one

    # Then, with a new worker, the run goes on and every event of it reaches the receiver, in order
    stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
    asked = wait_parked(run_id, timeout=60)
    answer(asked["otp"].id, {"user": "ana", "otp": "123456"}, response_id=new_response_id(), principal=HUMAN)
    wait_status(run_id, "completed", timeout=60)
    expected = run_events(run_id)
    wait_for(lambda: receiver.of_run(run_id) == expected, sweep=True, timeout=60, what="every event delivered")

    # And the event in flight at the kill came again with its webhook-id, and nothing else repeated under another
    assert receiver.ids_name_one_event_each() and receiver.unverified == 0
    assert [r["id"] for r in receiver.got].count(receiver.got[0]["id"]) >= 2
