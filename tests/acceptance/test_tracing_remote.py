"""Tracing beyond the Python workers (issue 44): a remote worker's lease and the TypeScript client continuing
its trace, a re-drive of leased work linking to the lease before, and a push carrying the W3C ``traceparent``."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from models.tables import Continuation
from parkway.db import transaction
from tests.acceptance.push_support import serving
from tests.acceptance.test_typescript_client import build
from tests.acceptance.tracing_support import SERVER, Traced, ids_of, parked, traced, waits
from tests.support import ROOT, TARGET, pass_time, wait_for, wait_status

__all__ = ["traced"]  # the module's stack (tests/acceptance/tracing_support.py)


def test_a_remote_typescript_worker__continues_the_trace_it_leased(traced: Traced) -> None:
    t = traced
    build()  # the TypeScript client's package (make decides whether it is stale)
    env = {**os.environ, "PARKWAY_URL": str(t.http.base_url), "PARKWAY_TOKEN": t.tokens["tr-worker"]}
    agent = subprocess.Popen(["node", "tests/acceptance/trace_agent.mjs"], cwd=ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert agent.stdout is not None and agent.stdout.readline().strip() == "ready"
        # A decision whose continuation only the TypeScript worker serves
        run_id = t.start({"continuation": "trace.remote@1"})
        wait = parked(run_id)
        assert t.answer(wait.id).status_code == 200
        wait_status(run_id, "completed", sweep=False)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    # The item was handed out in a span of a new trace, linked to the park's and the answer's
    lease = t.span("parkway.lease", **{"parkway.run_id": run_id})
    won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    assert {ids_of(waits(run_id)[0].traceparent), (won.trace_id, won.span_id)} <= set(lease.links)

    # And the worker's calls on its lease (its tool call's intent and outcome, its completion) continue it
    def calls() -> set[str]:
        return {s.attributes.get("http.route", "") for s in t.receiver.spans
                if s.kind == SERVER and s.trace_id == lease.trace_id and s.parent == lease.span_id}  # fmt: skip

    wanted = {"/v1/worker/leases/{lease_id}/tools", "/v1/worker/leases/{lease_id}/complete"}
    wait_for(lambda: wanted <= calls(), timeout=30, what=f"the worker's calls in the lease's trace: {calls()}")


def _lease(t: Traced, wait_s: float = 10) -> dict[str, Any]:
    """One item of ``trace.remote@1``, leased over HTTP as a remote worker does."""
    ask = {"worker": "trace-py", "serves": ["trace.remote@1"], "max": 1, "lease_s": 60, "wait_s": wait_s}
    leased = t.http.post("/v1/worker/lease", json=ask, headers=t.auth("tr-worker"), timeout=wait_s + 30)
    assert leased.status_code == 200, leased.text
    (item,) = leased.json()["items"]
    return dict(item)


def _claimed_trace(continuation_id: str) -> str | None:
    with transaction() as session:
        found = session.get(Continuation, continuation_id)
        assert found is not None
        return found.claimed_trace


def test_a_remote_lease__writes_its_claims_trace_and_a_redrive_links_to_it(traced: Traced) -> None:
    t = traced
    # Given a decision whose continuation only a remote worker serves (advertised by a lease call of nothing)
    advertised = {"worker": "trace-py", "serves": ["trace.remote@1"], "max": 0, "wait_s": 0}
    assert t.http.post("/v1/worker/lease", json=advertised, headers=t.auth("tr-worker")).status_code == 200
    run_id = t.start({"continuation": "trace.remote@1"})
    wait = parked(run_id)
    assert t.answer(wait.id).status_code == 200
    # When a remote worker leases it: the claim stores the span its item was handed out in, as a Celery claim does
    first = _lease(t)
    continuation_id = first["lease_id"].split(".")[0]
    assert first["traceparent"] is not None
    assert _claimed_trace(continuation_id) == first["traceparent"]
    # And when that worker goes away, its lease runs out and another lease takes the work (a re-drive)
    pass_time(3600)
    second = _lease(t)
    assert second["lease_id"].split(".")[0] == continuation_id and second["attempt"] == 2
    done = t.http.post(f"/v1/worker/leases/{second['lease_id']}/complete", headers=t.auth("tr-worker"),
                       json={"outcome": {"type": "complete", "result": "ok"}})  # fmt: skip
    assert done.status_code == 200, done.text
    # Then the second lease's span links to the first's
    redrive = t.span("parkway.lease", **{"parkway.lease_id": second["lease_id"]})
    assert ids_of(first["traceparent"]) in redrive.links, (first["traceparent"], redrive.links)


def test_a_push__carries_the_traceparent_header_of_its_execution(traced: Traced) -> None:
    t = traced
    with serving() as handler:
        made = t.http.post("/v1/handlers", json={"url": handler.url, "serves": ["push.ask"]},
                           headers=t.auth("tr-admin"))  # fmt: skip
        assert made.status_code == 201, made.text
        handler.secret = made.json()["secret"]
        try:
            started = t.http.post("/v1/runs", json={"workflow": "push.ask", "payload": {}, "target": TARGET},
                                  headers=t.auth("tr-agent"))  # fmt: skip
            assert started.status_code == 201, started.text
            run_id = started.json()["id"]
            wait_status(run_id, "completed", sweep=False)
        finally:
            t.http.delete(f"/v1/handlers/{made.json()['id']}", headers=t.auth("tr-admin"))
    # The POST carried its item's traceparent as the W3C header too: the push execution's span
    pushed = t.span("parkway.push_step", **{"parkway.run_id": run_id})
    (got,) = handler.got
    assert got["item"]["traceparent"] and got.get("traceparent") == got["item"]["traceparent"], got
    assert ids_of(got["traceparent"]) == (pushed.trace_id, pushed.span_id)
