"""One executor for the three runners (tasks/executor.py): a fault injected in its commit path is seen the same
way whichever runner ran the body — a Python body in a Celery worker, a push handler's answer, a remote
worker's completion over HTTP. Real processes: the process that runs the executor for that runner (the Celery
worker for a Python body and for a push, uvicorn for a remote completion) dies at the crash point and is
started again, or the claim is taken over while the body runs; either way the execution commits nothing and
the work is re-driven to one commit. And a push handler's 410 is "not served here": the work is handed on, as
any work a runner does not run, to the worker that serves its key."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from parkway.db import transaction
from tasks.sdk import answer
from tests import support
from tests.acceptance.conftest import remote_principals
from tests.acceptance.push_support import Handler, register
from tests.api.conftest import ApiServer
from tests.support import TARGET, Stack, Worker, start, wait_for, wait_status

pytestmark = pytest.mark.usefixtures("own_workers")

POINT = "resume.before_commit"
STEAL = text(
    "UPDATE continuations SET claimed_by = 'thief', lease_expires_at = now() + interval '3 seconds' "
    "WHERE run_id = :run_id AND status = 'claimed' RETURNING id"
)


@dataclass(frozen=True)
class Fault:
    """A fault of the execution before its commit: the crash point its process dies at (``crash_at``, then
    restarted), or else its claim taken over while the body runs (``during``); ``shown`` in that process's log."""

    crash_at: str | None
    shown: str

    def during(self, run_id: str) -> None:
        if self.crash_at is None:  # the claim taken over (its lease ran out and another execution took it)
            with transaction() as session:
                assert len(session.execute(STEAL, {"run_id": run_id}).all()) == 1

    def after(self, log: Callable[[], str], restart: Callable[[], object]) -> None:
        wait_for(lambda: self.shown in log(), timeout=30, what=self.shown)
        if self.crash_at is not None:
            restart()


FAULTS = {
    "crash": Fault(POINT, f"crash point {POINT} reached"),
    "lost": Fault(None, "claim lost before commit"),
}


def _celery(stack: Stack, fault: Fault, client: TestClient, handler: Handler, flag: Path) -> str:
    """A Python step run by a Celery worker."""
    worker = stack.start_worker(PARKWAY_CRASH_AT=fault.crash_at)
    run_id = start("t.gated", {"flag": str(flag)})
    wait_for(Path(f"{flag}.running").exists, what="the body running")
    fault.during(run_id)
    flag.touch()
    fault.after(worker.text, lambda: _restart(stack, worker))
    return run_id


def _restart(stack: Stack, worker: Worker) -> None:
    worker.kill()
    stack.start_worker()


def _push(stack: Stack, fault: Fault, client: TestClient, handler: Handler, flag: Path) -> str:
    """A step a push handler serves, POSTed by a Celery worker."""
    key = f"exec.pushed.{uuid.uuid4().hex[:8]}"  # an earlier test's handler, gone now, serves no key of this one
    register(client, handler, [key])
    handler.gate = threading.Event()
    worker = stack.start_worker(PARKWAY_CRASH_AT=fault.crash_at)
    run_id = start(key, {})
    wait_for(lambda: handler.got, what="the body running: the push to the handler")
    fault.during(run_id)
    handler.gate.set()
    fault.after(worker.text, lambda: _restart(stack, worker))
    wait_status(run_id, "completed", timeout=60)
    assert len(handler.got) == 2 and len({r["id"] for r in handler.got}) == 1  # posted again, as one message
    return run_id


def _remote(stack: Stack, fault: Fault, client: TestClient, handler: Handler, flag: Path) -> str:
    """A step a remote worker serves, completed over HTTP to uvicorn (which says a lost claim as 409)."""
    api = ApiServer(database_url=stack.database_url, log=flag.parent / "uvicorn.log")
    api.start(PARKWAY_CRASH_AT=fault.crash_at)
    try:
        with api.client() as http:
            tokens = remote_principals(http, **{role: f"exec-{role}-{flag.parent.name}"[:60] for role in ROLES})
            remote = _Remote(http, *(tokens[f"exec-{role}-{flag.parent.name}"[:60]] for role in ("worker", "agent")))
            run_id = remote.start()
            [item] = wait_for(lambda: remote.lease(n=1), what="the step leased")
            fault.during(run_id)
            lost = _complete(remote, item)
        if fault.crash_at is not None:
            fault.after(api.text, lambda: (api.wait_exit(), api.start()))
        else:
            assert lost is not None and lost.status_code == 409 and lost.json()["error"] == "lease_lost", lost
        with api.client() as http:
            remote = _Remote(http, remote.worker, remote.agent)
            [item] = wait_for(lambda: remote.lease(n=1), what="the step leased again once its lease ran out")
            done = _complete(remote, item)
            assert done is not None and done.status_code == 200, done
    finally:
        api.stop()
    return run_id


ROLES = ("admin", "agent", "human", "worker")


def _complete(remote: _Remote, item: dict[str, Any]) -> httpx.Response | None:
    """The completion's answer; ``None`` when the API died under the call."""
    try:
        return remote.complete(item["lease_id"])
    except httpx.TransportError:
        return None


class _Remote:
    """A remote worker serving ``exec.remote``, and the agent that starts its runs, calling the protocol as an
    agent in another language does (with their tokens)."""

    def __init__(self, http: httpx.Client, worker: str, agent: str) -> None:
        self.http, self.worker, self.agent = http, worker, agent

    def start(self) -> str:
        self.lease(n=0)  # advertises the step
        body = {"workflow": "exec.remote", "payload": {}, "target": TARGET}
        made = self.http.post("/v1/runs", json=body, headers=_auth(self.agent))
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def lease(self, *, n: int) -> list[Any]:
        body = {"worker": "exec-agent-1", "serves": ["exec.remote"], "max": n, "wait_s": 0, "lease_s": 5}
        got = self.http.post("/v1/worker/lease", json=body, headers=_auth(self.worker))
        assert got.status_code == 200, got.text
        return list(got.json()["items"])

    def complete(self, lease_id: str) -> httpx.Response:
        outcome = {"outcome": {"type": "complete", "result": "done"}}
        return self.http.post(f"/v1/worker/leases/{lease_id}/complete", json=outcome, headers=_auth(self.worker))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


RUNNERS = {"celery": _celery, "push": _push, "remote": _remote}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_executor__a_fault_before_the_commit_is_seen_alike_by_every_runner_and_redriven_to_one_commit(
    stack: Stack, client: TestClient, handler: Handler, tmp_path: Path, runner: str, fault: str
) -> None:
    # Given a run whose first step this runner runs, When the fault hits the execution before its commit
    # (the process running the executor dies there, or another execution took the claim over)
    run_id = RUNNERS[runner](stack, FAULTS[fault], client, handler, tmp_path / "go")

    # Then, whatever the runner: that execution committed nothing, and the run completed once, committed by
    # the second execution of its step
    run = wait_status(run_id, "completed", timeout=60)
    assert run.completed_at is not None and support.event_types(run_id).count("run.completed") == 1
    [step] = support.continuations(run_id)
    assert (step.status, step.attempts) == ("consumed", 2)


def test_executor__a_push_handler_410_hands_the_work_on_to_the_worker_that_serves_its_key(
    stack: Stack, client: TestClient, handler: Handler
) -> None:
    # Given a worker that does not run release B, and a push handler registered for release B's step that
    # answers 410 (mid-deploy, it lacks the key), to which the step went
    stack.start_worker()
    register(client, handler, ["b.ask"])
    handler.last = (410, {})
    run_id = start("b.ask", {"n": 1})
    wait_for(lambda: handler.got, what="the push of the step to the handler")

    # When a worker that runs release B starts
    stack.start_worker(PARKWAY_IMPORTS="tests.release_b")

    # Then the step runs on that worker (it parks, as release B's code does), and so does its continuation
    asked = support.wait_parked(run_id, timeout=60)
    answer(asked["go"].id, "ship", response_id=support.new_response_id(), principal=support.HUMAN)
    run = wait_status(run_id, "completed", timeout=60)
    assert run.result == {"go": "ship"} and support.effects(run_id, "b.done") == 1
    assert "run.interrupted" not in support.event_types(run_id)
    # And a 410 spent no attempt: each push went as the step's first
    assert {r["item"]["attempt"] for r in handler.got} == {1}
