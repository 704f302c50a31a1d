"""Nothing a subscription matches is lost when the worker delivering it is SIGKILLed mid-request, the
broker loses every queued message, or PostgreSQL restarts mid-stream: the cursor is in the database, and the
sweep drives the subscription again once the dead attempt's lease has run out. The repeat carries the same
webhook-id. And however many
workers and sweeps, one request of a subscription at most is in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fastapi.testclient import TestClient

from beat.sweep import run_sweep
from tasks.sdk import answer
from tests.acceptance.webhook_receiver import IMPORTS, Receiver, complete_and_deliver, run_events, subscribe
from tests.proxy import Proxy, through_proxy
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
        complete_and_deliver(receiver, [start("wh.login") for _ in range(3)])
    finally:
        done.set()
        for sweeper in sweepers:
            sweeper.join()

    # Then every event arrived in order, and never two requests of the subscription at once
    assert receiver.most_in_flight == 1
    assert receiver.ids_name_one_event_each() and receiver.unverified == 0
    arrivals = [r["body"]["data"]["seq"] for r in receiver.got]
    assert arrivals == sorted(arrivals)


def test_deliveries__a_database_restart_mid_stream_loses_nothing_and_repeats_only_with_the_same_id(
    stack: Stack, own_workers: None, client: TestClient, receiver: Receiver
) -> None:
    """The worker reaches PostgreSQL through a TCP proxy (tests/proxy.py), cut as a restart cuts every
    connection and refuses new ones for a while, then restored; the shared server is never stopped."""
    proxy, through = through_proxy(stack.database_url)
    proxy.start()
    try:
        # Given a subscription, and a worker that reaches the database only through the proxy
        subscribe(client, receiver, targets=["team:ops"])
        stack.start_worker(PARKWAY_IMPORTS=IMPORTS, PARKWAY_DATABASE_URL=through)
        run_ids = [start("wh.login") for _ in range(2)]

        # When the database goes away while a request is in flight, which is answered 2xx meanwhile (so its
        # cursor cannot move), and more events are written in the outage
        restart_during(proxy, receiver, answered=204, also=lambda: run_ids.append(start("wh.login")))
        first_repeated = receiver.got[0]["id"]
        wait_for(lambda: [r["id"] for r in receiver.got].count(first_repeated) >= 2, sweep=True, timeout=60,
                 what="the event answered in the outage sent again")  # fmt: skip
        # And again, with the request in flight (of a new run's events: the others may all be delivered by
        # now) answered 503, so its failure cannot be recorded
        restart_during(proxy, receiver, answered=503, first=lambda: run_ids.append(start("wh.login")))

        # Then every run goes on, and every event of every run reaches the receiver, in order
        complete_and_deliver(receiver, run_ids, timeout=90, sweep=True)
    finally:
        proxy.cut()

    # And the first arrivals came in seq order, each verified; a repeat only under the id it had
    ids = [r["id"] for r in receiver.got]
    firsts = [r["body"]["data"]["seq"] for i, r in enumerate(receiver.got) if r["id"] not in ids[:i]]
    repeated = {i: ids.count(i) for i in ids if ids.count(i) > 1}
    print(
        f"\nPostgreSQL restarts (2 cuts of {OUTAGE_S}s): {len(run_ids)} runs, {len(firsts)} events delivered in"
        f" seq order with {len(ids)} requests; repeated ids {repeated}; proxy connections {proxy.accepted}"
    )
    assert firsts == sorted(firsts)
    assert receiver.ids_name_one_event_each() and receiver.unverified == 0
    assert ids.count(first_repeated) >= 2  # answered 2xx while the database was away: sent again, same id


OUTAGE_S = 3.0  # how long the database stays unreachable each time


def restart_during(
    proxy: Proxy,
    receiver: Receiver,
    *,
    answered: int,
    first: Callable[[], object] = lambda: None,
    also: Callable[[], object] = lambda: None,
) -> None:
    """Hold the next request (after ``first``); cut the database; answer the request ``answered``; ``also``;
    restore it."""
    receiver.arrived.clear()
    receiver.held.set()
    first()
    wait_for(receiver.arrived.is_set, sweep=True, timeout=60, what="a delivery in flight")
    proxy.cut()
    with receiver.lock:
        receiver.script.insert(0, (answered, {}))
    receiver.held.clear()
    also()
    time.sleep(OUTAGE_S)  # the outage itself, not a wait for a condition
    proxy.restore()
