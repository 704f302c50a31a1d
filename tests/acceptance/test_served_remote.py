"""One meaning of served across kinds of workers (issue 41): work only remote workers serve never reaches a
Celery queue, work made while a remote worker served its key goes to a Python worker that serves it, and an
API outage longer than the grace interrupts no remote wait (the remote fleet's grace counts from the API's
return)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import tests.release_a
from beat.sweep import queued, run_sweep
from tasks.celery_app import CONTINUATIONS_QUEUE, PUSH_QUEUE, STEPS_QUEUE, WEBHOOKS_QUEUE
from tests.acceptance.conftest import remote_principals
from tests.acceptance.protocol_support import PLAN, Proto
from tests.api.conftest import ApiServer
from tests.support import Stack, effects, event_types, pass_time, read_now, run_status, wait_for, wait_status

pytestmark = [pytest.mark.usefixtures("own_workers"), pytest.mark.broker]
assert tests.release_a

QUEUES = (STEPS_QUEUE, CONTINUATIONS_QUEUE, WEBHOOKS_QUEUE, PUSH_QUEUE)
SERVES_A = text(
    "SELECT count(*) FROM workers WHERE expires_at > now() AND NOT remote AND 'a.done@1' = ANY(continuations)"
)


@pytest.fixture(scope="module")
def uvicorn(stack: Stack) -> Iterator[ApiServer]:
    """A uvicorn of this module's own, and no Celery worker unless a test starts one."""
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-served.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api(uvicorn: ApiServer) -> Iterator[Proto]:
    with uvicorn.client() as http:
        roles = ("admin", "agent", "human", "worker")
        made = remote_principals(http, **{role: f"proto-{role}" for role in roles})
        yield Proto(http=http, tokens={role: made[f"proto-{role}"] for role in roles}, celery=None)  # type: ignore[arg-type]


def _started(proto: Proto, workflow: str) -> str:
    made = proto.call("POST", "/v1/runs", "agent", {"workflow": workflow, "payload": {}, "target": proto.target})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_remote_only_work__starts_and_nexts_included__never_reach_a_celery_queue(stack: Stack, api: Proto) -> None:
    # Given a remote worker that serves proto.plan (and no Celery worker does), and empty queues
    proto = api.for_test()
    stack.flush_broker()

    # When a run of proto.plan starts, and its step hands on to proto.plan again (Next)
    run_id = _started(proto, PLAN)
    item: dict[str, Any] = proto.lease_one(run_id)
    assert proto.complete(item["lease_id"], {"type": "next", "step": PLAN, "payload": {"n": 1}}).status_code == 200

    # Then no Celery queue holds a message, and the remote worker leases the Next
    assert queued(*QUEUES) == 0
    following = proto.lease_one(run_id)
    assert (following["kind"], following["name"]) == ("start", PLAN)
    assert proto.complete(following["lease_id"], {"type": "complete"}).status_code == 200
    assert queued(*QUEUES) == 0


def test_work_made_while_a_remote_worker_served_its_key__runs_on_the_python_worker_that_starts(
    stack: Stack, api: Proto
) -> None:
    # Given a run of release A parked on a.done@1 by its Python worker, and a remote worker that served a.done@1
    proto = api.for_test()
    python = stack.start_worker(PARKWAY_IMPORTS="tests.release_a")
    run_id = _started(proto, "a.ask")
    wait_for(lambda: proto.run(run_id)["status"] == "waiting", timeout=30, what="a.ask parked")
    assert proto.lease(n=0, wait_s=0, serves=("a.done@1",)) == []  # it advertises, then stops calling

    # When the Python worker is stopped, the wait is answered, and the Python worker starts again
    python.kill()
    wait_for(lambda: read_now(SERVES_A) == 0, timeout=30, what="the Python worker's heartbeat run out")
    proto.answer(run_id, "yes", key="go")
    stack.start_worker(PARKWAY_IMPORTS="tests.release_a")

    # Then the run completes on it, once
    assert wait_status(run_id, "completed").result == {"go": "yes"}
    assert effects(run_id, "a.done") == 1


RESUME_IS_REMOTE = text("SELECT remote FROM continuations WHERE run_id = :r AND kind = 'resume'")


def test_work_made_while_no_worker_was_live__goes_to_the_remote_worker_as_its_lease_calls_come_back(
    stack: Stack, api: Proto
) -> None:
    # Given a run parked from outside on proto.decide@1, which only the remote worker serves, no Celery worker
    # and no sweep, and a remote worker that has not called for longer than its registry row lives
    proto = api.for_test()
    run_id = proto.park()
    pass_time(120)

    # When the wait is answered meanwhile: nothing live serves its key, so its continuation is made for Celery
    proto.answer(run_id, {"code": "123456", "note": "ok"})
    assert read_now(RESUME_IS_REMOTE, r=run_id) is False

    # Then the remote worker's next lease call, which makes it live again, takes it (no sweep re-routes it)
    item = proto.lease_one(run_id)
    assert (item["kind"], item["key"]) == ("resume", "proto.decide@1")
    assert proto.complete(item["lease_id"], {"type": "complete", "result": "done"}).status_code == 200
    assert wait_status(run_id, "completed").result == "done"


def test_an_api_outage_longer_than_the_grace__interrupts_no_remote_wait_and_it_completes_after(
    stack: Stack, uvicorn: ApiServer, api: Proto
) -> None:
    # Given a run parked from outside on proto.decide@1, which only the remote worker serves, and a Celery
    # worker of release A (other keys) whose sweeps run throughout
    proto = api.for_test()
    run_id = proto.park()
    stack.start_worker(PARKWAY_IMPORTS="tests.release_a")

    # When the API is killed, and stays down longer than the grace (PARKWAY_VERSION_GRACE_S 5) and the remote
    # worker's registry row (PARKWAY_REMOTE_WORKER_TTL_S 60), sweeps running meanwhile
    assert uvicorn.proc is not None
    os.killpg(uvicorn.proc.pid, signal.SIGKILL)
    uvicorn.proc.wait(timeout=20)
    pass_time(120)
    for _ in range(3):
        assert run_sweep().counts["unregistered"] == 0
    assert run_status(run_id) == "waiting"

    # Then after the API returns, the remote worker leases again and the wait completes: nothing interrupted
    uvicorn.start()
    proto.answer(run_id, {"code": "123456", "note": "ok"})
    item = proto.lease_one(run_id)
    assert proto.complete(item["lease_id"], {"type": "complete", "result": "done"}).status_code == 200
    run = wait_status(run_id, "completed")
    assert run.result == "done" and "run.interrupted" not in event_types(run_id)
