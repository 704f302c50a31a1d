"""Nothing a subscription matches is lost when the worker delivering it is SIGKILLed mid-request and the
broker loses every queued message: the cursor is in the database, and the sweep drives the subscription
again once the dead attempt's lease has run out. The repeat carries the same webhook-id. And however many
workers and sweeps, one request of a subscription at most is in flight."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from beat.sweep import run_sweep
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


def test_deliveries__two_workers_and_concurrent_sweeps_never_send_one_subscription_twice_at_once(
    stack: Stack, own_workers: None, client: TestClient, receiver: Receiver
) -> None:
    # Given two workers, a slow receiver, and sweeps running back to back from two threads (each publishing
    # the subscription whenever it is behind and unclaimed, again each PARKWAY_REENQUEUE_AFTER_S)
    receiver.delay_s = 0.2
    subscribe(client, receiver, targets=["team:ops"])
    for _ in range(2):
        stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
    done = threading.Event()

    def sweeping() -> None:
        while not done.is_set():
            run_sweep()

    sweepers = [threading.Thread(target=sweeping) for _ in range(2)]
    for sweeper in sweepers:
        sweeper.start()
    try:
        # When runs ask and complete
        run_ids = [start("wh.login") for _ in range(3)]
        for run_id in run_ids:
            asked = wait_parked(run_id, timeout=60)
            answer(asked["otp"].id, {"user": "ana", "otp": "123456"}, response_id=new_response_id(), principal=HUMAN)
        for run_id in run_ids:
            wait_status(run_id, "completed", timeout=60)
            expected = run_events(run_id)
            wait_for(lambda: receiver.of_run(run_id) == expected, timeout=60, what="every event delivered")  # noqa: B023
    finally:
        done.set()
        for sweeper in sweepers:
            sweeper.join()

    # Then every event arrived in order, and never two requests of the subscription at once
    assert receiver.most_in_flight == 1
    assert receiver.ids_name_one_event_each() and receiver.unverified == 0
    arrivals = [r["body"]["data"]["seq"] for r in receiver.got]
    assert arrivals == sorted(arrivals)
