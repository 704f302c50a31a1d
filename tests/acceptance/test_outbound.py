"""Webhook deliveries (and pushes) on a worker of their own, as ``parkway up`` and docker-compose run them
(``parkway.children.WORK_QUEUES`` / ``OUTBOUND_QUEUES``; tests/deploy/test_compose.py checks both use these):
a receiver that holds every request open holds the outbound worker's process, never the worker's, so runs
go on meanwhile; and what it held is delivered once it answers. And it runs no bodies: it advertises nothing
and is never a hand-on target (issue 41, item 5)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import text

import tests.release_b
from parkway.children import OUTBOUND_QUEUES, WORK_QUEUES
from parkway.db import transaction
from tasks.sdk import answer
from tests.acceptance.webhook_receiver import IMPORTS, Receiver, run_events, subscribe
from tests.support import HUMAN, Stack, event_types, new_response_id, start, wait_for, wait_parked, wait_status

assert tests.release_b  # b.ask known to this process, which starts its runs (only the outbound worker runs it)

# Longer than the test: a held request must not time out and free the process by itself.
HOLD = {"PARKWAY_IMPORTS": IMPORTS, "PARKWAY_WEBHOOK_TIMEOUT_S": "600"}


def test_outbound__a_receiver_that_never_answers_holds_up_no_run(
    stack: Stack, own_workers: None, client: TestClient, receiver: Receiver
) -> None:
    # Given the deployed shape with one process each: a worker on the work queues, an outbound worker on the
    # outbound queues; and a subscription whose receiver holds every request open
    stack.start_worker(concurrency=1, queues=WORK_QUEUES, **HOLD)
    stack.start_worker(concurrency=1, queues=OUTBOUND_QUEUES, **HOLD)
    subscribe(client, receiver, targets=["team:ops"])
    receiver.held.set()

    # When a run parks, and the delivery of its events is in flight, held
    run_id = start("wh.login")
    asked = wait_parked(run_id, timeout=60)
    wait_for(receiver.arrived.is_set, sweep=True, timeout=60, what="a delivery in flight")

    # Then the run is resumed and completes while the receiver still holds that request
    answer(asked["otp"].id, {"user": "ana", "otp": "123456"}, response_id=new_response_id(), principal=HUMAN)
    wait_status(run_id, "completed", timeout=60)
    assert receiver.in_flight == 1 and receiver.got == []

    # And once the receiver answers, every event of the run reaches it, in order
    receiver.held.clear()
    expected = run_events(run_id)
    wait_for(lambda: receiver.of_run(run_id) == expected, sweep=True, timeout=60, what="every event delivered")


def test_outbound__runs_no_body_advertises_nothing_and_is_never_a_hand_on_target(
    stack: Stack, own_workers: None
) -> None:
    # Given an outbound worker whose imports (release B) define the step b.ask, and a worker on the work queues
    # whose imports (release A) do not
    outbound = stack.start_worker(queues=OUTBOUND_QUEUES, PARKWAY_IMPORTS="tests.release_b")
    work = stack.start_worker(queues=WORK_QUEUES, PARKWAY_IMPORTS="tests.release_a")

    # When a run of b.ask starts
    run_id = start("b.ask", {"n": 1})

    # Then the worker that receives it hands it on to no one (the outbound worker advertises nothing): the
    # step waits as any unserved work, and past the grace (PARKWAY_VERSION_GRACE_S 5) is interrupted
    run = wait_status(run_id, "interrupted", timeout=40)
    assert (run.reason or "").startswith("step b.ask: no live worker has"), run.reason
    assert "step.parked" not in event_types(run_id)  # release B's body parks: it never ran
    assert "b.ask is not run here: left for the sweep" in work.text() and "handed on to" not in work.text()
    assert "Task parkway.run_step[" not in outbound.text()  # never received one
    with transaction() as session:
        nodes = session.execute(text("SELECT node FROM workers WHERE expires_at > now()")).scalars().all()
    assert not any(node.startswith(f"{outbound.name}@") for node in nodes), nodes
