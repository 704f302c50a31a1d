"""Push handlers end to end (docs/worker-protocol.md, "Push"): a real worker subprocess POSTs the work of a
step or continuation to a handler started by the test on 127.0.0.1, which verifies every request with the
``standardwebhooks`` package and answers what the test scripted; the answer is committed once, retried with
the same ``webhook-id``, fails the run, or interrupts it (a 410: tests/acceptance/test_executor.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from models import store
from models.status import ContinuationKind
from models.tables import Event
from parkway.db import single_statement, transaction
from tasks.sdk import answer
from tests.acceptance.protocol_support import receipts
from tests.acceptance.push_support import DROP, SLOW, Handler, register
from tests.support import (
    HUMAN,
    Stack,
    interactions,
    new_response_id,
    pass_time,
    run_row,
    start,
    wait_parked,
    wait_status,
)


@pytest.fixture(scope="module")
def worker(stack: Stack):  # type: ignore[no-untyped-def]
    return stack.start_worker(PARKWAY_IMPORTS="tests.workflows")


def completed_events(run_id: str) -> int:
    with transaction() as session:
        found = select(func.count()).where(Event.run_id == run_id, Event.type == "run.completed")
        return int(session.scalar(found) or 0)


def test_push__a_step_and_its_continuation_are_posted_and_committed_once(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a push handler serving a step and the continuation it parks on
    made = register(client, handler, ["push.ask", "push.ask_after@1"])
    question = {"kind": "question", "key": "ok", "prompt": "Go?", "target": "team:ops",
                "schema": {"type": "object", "properties": {"go": {"type": "boolean"}}}}  # fmt: skip
    handler.script = [(200, {"type": "park", "continuation": "push.ask_after@1", "snapshot": {"n": 1},
                             "interactions": [question]})]  # fmt: skip

    # When a run of the step starts (nothing in Python serves it), is parked by the handler, and is answered
    run_id = start("push.ask", {"n": 1})
    asked = wait_parked(run_id)
    answer(asked["ok"].id, {"go": True}, response_id=new_response_id(), principal=HUMAN)
    wait_status(run_id, "completed")

    # Then the handler got the start item, then the resume item with the answer, each signed
    assert handler.unverified == 0
    items = [r["item"] for r in handler.got]
    assert [(i["kind"], i["key"], i["attempt"]) for i in items] == [("start", "push.ask", 1),
                                                                   ("resume", "push.ask_after@1", 1)]  # fmt: skip
    assert items[0]["payload"] == {"n": 1} and items[1]["snapshot"] == {"n": 1}
    assert items[1]["answers"]["ok"]["value"] == {"go": True}
    assert handler.got[1]["id"] == f"push_{items[1]['lease_id'].split('.')[0]}"

    # And each was committed once: one receipt per push, one completion
    assert run_row(run_id).result == "done"
    assert (receipts(run_id), completed_events(run_id)) == (2, 1)
    listed = [h for h in client.get("/v1/handlers").json()["items"] if h["id"] == made["id"]]
    assert [(h["attempts"], h["failures"], "secret" in h) for h in listed] == [(2, 0, False)]
    assert any(w["node"] == f"push:{made['id']}" for w in client.get("/v1/workers").json()["items"])


def test_push__a_timeout_a_5xx_and_a_lost_connection_are_retried_with_the_same_id(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a handler that answers 500, drops the connection, answers too late, then completes
    made = register(client, handler, ["push.retry"])
    handler.script = [(500, {}), (DROP, None), (SLOW, {"type": "complete", "result": "late"})]

    # When a run of its step starts
    run_id = start("push.retry", {})

    # Then it completes with the fourth answer, committed once
    wait_status(run_id, "completed", timeout=60)
    assert run_row(run_id).result == "done"
    assert (receipts(run_id), completed_events(run_id)) == (1, 1)

    # And every attempt carried the same webhook-id, its attempt counted
    assert len({r["id"] for r in handler.got}) == 1 and len(handler.got) == 4
    assert [r["item"]["attempt"] for r in handler.got] == [1, 2, 3, 4]

    # And /metrics counts the attempts and failures by handler
    metrics = client.get("/metrics").text
    assert f'parkway_push_attempts_total{{handler="{made["id"]}"}} 4.0' in metrics
    assert f'parkway_push_failures_total{{handler="{made["id"]}"}} 3.0' in metrics


def test_push__an_answer_that_is_no_outcome_fails_the_run(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a handler that answers garbage, then JSON of no outcome, then an outcome that cannot be committed
    register(client, handler, ["push.bad"])
    handler.script = [(200, b"<html>oops</html>"), (200, {"type": "explode"}),
                      (200, {"type": "park", "continuation": "push.bad@1", "interactions": []})]  # fmt: skip

    # When three runs of its step start, one after the other
    runs = []
    for _ in range(3):
        runs.append(start("push.bad", {}))
        wait_status(runs[-1], "failed")

    # Then each failed once, with an error that says what the handler answered; nothing was retried
    errors = [run_row(run_id).error or "" for run_id in runs]
    assert "answered 200 with not JSON" in errors[0]
    assert "answered 200 with not an outcome" in errors[1]
    assert "answered 200 with an outcome that cannot be committed (Park needs at least one" in errors[2]
    assert len(handler.got) == 3 and all(receipts(run_id) == 1 for run_id in runs)


def test_push__a_503_is_retried_until_out_of_attempts_then_interrupted(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a handler that answers 503 to everything
    register(client, handler, ["push.gone"])
    handler.last = (503, {})

    # When a run of its step starts: retried until out of attempts (PARKWAY_MAX_ATTEMPTS 5), then interrupted
    dead = start("push.gone", {})
    wait_status(dead, "interrupted", timeout=60)
    assert "answered 503" in (run_row(dead).reason or "")
    assert len(handler.got) == 5
    assert len({r["id"] for r in handler.got}) == 1


def served(key: str) -> bool:
    with single_statement() as conn:
        return store.serving(conn, ContinuationKind.START, key).served


def test_push__a_handler_that_answers_410_for_its_only_key_stops_serving_it_and_the_run_is_interrupted(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a push handler, the only server of a step, that answers 410 for it (it lacks the key, or is gone)
    register(client, handler, ["push.refused"])
    handler.last = (410, {})

    # When a run of its step starts
    run_id = start("push.refused", {})

    # Then the 410 took the key out of what the handler serves: the step waits as any work nothing serves,
    # and past the grace (PARKWAY_VERSION_GRACE_S 5) the run is interrupted naming the step, never failed
    run = wait_status(run_id, "interrupted", timeout=40)
    assert (run.reason or "").startswith("step push.refused: no live worker has advertised it since"), run.reason
    assert not served("push.refused")
    # And the work was never offered to that handler again: no cycle of pushes
    assert len(handler.got) == 1


def test_push__a_handler_is_live_by_its_success_and_an_idle_one_is_offered_work_and_serves_again(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a handler registered for a step, which then accepted no push for longer than PARKWAY_PUSH_LIVE_S
    made = register(client, handler, ["push.idle"])
    assert served("push.idle")
    pass_time(8 * 86400)

    # Then it no longer counts as serving its key
    assert not served("push.idle")
    assert not any(w["node"] == f"push:{made['id']}" for w in client.get("/v1/workers").json()["items"])

    # When a run of its step starts: the work is offered to it all the same, and it accepts it
    run_id = start("push.idle", {})
    wait_status(run_id, "completed")

    # Then its success makes it live again: it serves the key, listed among the workers
    assert served("push.idle") and len(handler.got) == 1
    assert any(w["node"] == f"push:{made['id']}" for w in client.get("/v1/workers").json()["items"])


def test_push__a_handler_url_follows_the_webhooks_rules_and_a_removed_one_serves_nothing(
    client: TestClient, handler: Handler
) -> None:
    before = client.get("/v1/handlers").json()["items"]
    for url, serves, why in (
        ("http://10.1.2.3/push", "x", "resolves to 10.1.2.3, a private address (PARKWAY_WEBHOOK_ALLOWED_NETWORKS can"),
        ("http://[64:ff9b::a9fe:a9fe]/push", "x", "the NAT64 form of 169.254.169.254, a link-local address"),
        ("http://127.0.0.1:9/push", "x@0", "'x@0': a continuation key is name@version"),
    ):
        refused = client.post("/v1/handlers", json={"url": url, "serves": [serves]})
        assert refused.status_code == 422 and why in refused.json()["detail"], refused.text
    assert client.get("/v1/handlers").json()["items"] == before  # nothing stored

    made = register(client, handler, ["push.removed"])
    assert client.delete(f"/v1/handlers/{made['id']}").status_code == 204
    assert client.delete(f"/v1/handlers/{made['id']}").status_code == 404
    with single_statement() as conn:  # a start waits for a worker that serves it, as after any worker's stop
        assert not store.serving(conn, ContinuationKind.START, "push.removed").served
    assert not any(w["node"] == f"push:{made['id']}" for w in client.get("/v1/workers").json()["items"])


def test_push__sensitive_answers_never_go_over_plain_http_outside_the_allowed_networks(
    stack: Stack, worker: Any, client: TestClient, handler: Handler
) -> None:
    # Given a step served by a handler in an allowed network (127.0.0.0/8), which parks it with a sensitive
    # question, and its continuation served by a handler at a plain http:// URL of a public address
    register(client, handler, ["push.secret"])
    public = client.post("/v1/handlers", json={"url": "http://93.184.216.34:9/push", "serves": ["push.secret_after@1"]})
    assert public.status_code == 201, public.text
    question = {"kind": "question", "key": "otp", "prompt": "Code?", "target": "team:ops", "sensitive": ["otp"],
                "schema": {"type": "object", "properties": {"otp": {"type": "string"}}}}  # fmt: skip
    handler.script = [(200, {"type": "park", "continuation": "push.secret_after@1", "interactions": [question]})]

    # When a run of the step parks and is answered with a sensitive value
    run_id = start("push.secret", {})
    asked = wait_parked(run_id)
    answer(asked["otp"].id, {"otp": "123456"}, response_id=new_response_id(), principal=HUMAN)

    # Then the continuation is not sent: the run is interrupted with the reason, as a system verdict
    run = wait_status(run_id, "interrupted", timeout=60)
    assert (
        f"sensitive values go to a push handler only over https or to an allowed network: push handler "
        f"{public.json()['id']} is plain http outside PARKWAY_WEBHOOK_ALLOWED_NETWORKS"
    ) == run.reason
    listed = {h["id"]: h["attempts"] for h in client.get("/v1/handlers").json()["items"]}
    assert listed[public.json()["id"]] == 0 and len(handler.got) == 1  # no POST made to it
    assert interactions(run_id)["otp"].secret is None  # erased with the run's end, never sent
