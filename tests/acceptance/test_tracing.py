"""One trace per decision (issue 44): a real OTLP/HTTP receiver behind a real stack (uvicorn and a Celery
worker, each exporting with the SDK): the spans of a decision, their attributes and links across the wait,
never a sensitive value; a wait of days on the database's clock; a re-drive after a worker was killed in a
body; and with no ``OTEL_*``, nothing set up at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from models.tables import Continuation, Event, Interaction
from parkway.db import transaction
from tasks.celery_app import SWEEP, SWEEP_QUEUE, app
from tests.acceptance.conftest import remote_principals
from tests.acceptance.otlp_receiver import Receiver, Span
from tests.acceptance.push_support import serving
from tests.acceptance.test_typescript_client import build
from tests.acceptance.trace_workflows import ASK, LOGGED
from tests.api.conftest import ApiServer
from tests.pages.conftest import Forms
from tests.support import ROOT, TARGET, Stack, child_env, pass_time, wait_for, wait_status

CONSUMER, SERVER = 5, 2
TRACE_URL = "https://jaeger.example/trace/{trace_id}"
CODE = "493817"  # the sensitive answer: never in an exported byte
IMPORTS = f"{os.environ.get('PARKWAY_IMPORTS', 'tests.workflows')},tests.acceptance.trace_workflows"


@dataclass
class Traced:
    receiver: Receiver
    http: httpx.Client
    tokens: dict[str, str]
    stack: Stack
    env: dict[str, str]

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def start(self, payload: dict[str, Any] | None = None) -> str:
        made = self.http.post("/v1/runs", json={"workflow": ASK, "payload": payload or {}, "target": TARGET},
                              headers=self.auth("tr-agent"))  # fmt: skip
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def answer(self, interaction_id: str, response_id: str = "r-1") -> httpx.Response:
        value = {"user": "ana", "otp": CODE}
        return self.http.post(f"/v1/interactions/{interaction_id}/answer", headers=self.auth("tr-human"),
                              json={"value": value, "response_id": response_id})  # fmt: skip

    def span(self, name: str, **attributes: Any) -> Span:
        wait_for(lambda: self.receiver.named(name, **attributes), timeout=30, what=f"span {name} {attributes}")
        found = self.receiver.named(name, **attributes)
        assert len(found) == 1, found
        return found[0]


@pytest.fixture(scope="module")
def traced(stack: Stack) -> Iterator[Traced]:
    receiver = Receiver().start()
    env = {**receiver.env(), "PARKWAY_IMPORTS": IMPORTS}
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-traced.log").start(
        PARKWAY_TRACE_URL=TRACE_URL, **env
    )
    worker = stack.start_worker(**env)
    try:
        with api.client() as http:
            names = ("tr-admin", "tr-agent", "tr-human", "tr-worker")
            tokens = remote_principals(http, **dict(zip(("admin", "agent", "human", "worker"), names, strict=True)))
            yield Traced(receiver, http, tokens, stack, env)
    finally:
        api.stop()
        worker.kill()
        receiver.stop()


def _waits(run_id: str) -> list[Interaction]:
    with transaction() as session:
        return list(session.scalars(select(Interaction).where(Interaction.run_id == run_id)).all())


def _parked(run_id: str) -> Interaction:
    wait_for(lambda: _waits(run_id), timeout=30, what=f"run {run_id} parked")
    (wait,) = _waits(run_id)
    return wait


def _event_traces(run_id: str) -> dict[str, str | None]:
    with transaction() as session:
        return {e.type: e.trace_id for e in session.scalars(select(Event).where(Event.run_id == run_id)).all()}


def _run_page(t: Traced, run_id: str) -> str:
    """The run's page as a signed-in person sees it."""
    with httpx.Client(base_url=t.http.base_url, timeout=30) as browser:
        login = Forms(browser.get("/decisions").text).forms["/decisions/login"]
        signed = browser.post("/decisions/login", data={**login, "token": t.tokens["tr-human"]})
        assert signed.status_code == 303, signed.text
        page = browser.get(f"/runs/{run_id}")
        assert page.status_code == 200, page.text
        return page.text


def _ids(traceparent: str | None) -> tuple[str, str]:
    """The (trace id, span id) a stored W3C traceparent names."""
    assert traceparent is not None
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def _in_trace(t: Traced, trace_id: str, name: str) -> Span:
    wait_for(lambda: [s for s in t.receiver.named(name) if s.trace_id == trace_id], timeout=30, what=name)
    (found,) = [s for s in t.receiver.named(name) if s.trace_id == trace_id]
    return found


def test_a_decision__its_spans_attributes_and_links_across_the_wait(traced: Traced) -> None:
    t = traced
    run_id = t.start()
    wait = _parked(run_id)
    answered = t.answer(wait.id)
    assert answered.status_code == 200, answered.text
    again = t.answer(wait.id, response_id="r-late")  # a second response: 409, and its span says so
    assert again.status_code == 409, again.text
    wait_status(run_id, "completed", sweep=False)
    by_run = {"parkway.run_id": run_id}

    # The run's start (API), in the trace of its HTTP request
    start = t.span("parkway.run.start", **by_run)
    assert start.attributes["parkway.workflow"] == ASK and start.attributes["parkway.principal"] == "tr-agent"
    http_start = [s for s in t.receiver.spans if s.span_id == start.parent]
    assert http_start and http_start[0].kind == SERVER and http_start[0].service == "parkway-api"

    # The step body's execution: a consumer span of its own trace, linked to the start; its commit and the
    # park inside it, ended with the commit, and the park's context stored on the wait
    step = t.span("parkway.run_step", **by_run)
    assert step.kind == CONSUMER and step.service == "parkway-worker" and step.trace_id != start.trace_id
    assert (start.trace_id, start.span_id) in step.links
    assert step.attributes["parkway.step"] == ASK and step.attributes["parkway.principal"] == "tr-agent"
    assert step.attributes["parkway.outcome"] == "Park"
    commit = _in_trace(t, step.trace_id, "parkway.commit")
    park = _in_trace(t, step.trace_id, "parkway.park")
    assert commit.parent == step.span_id and park.parent == commit.span_id
    assert park.attributes["parkway.waits"] == "otp" and park.end_ns <= commit.end_ns <= step.end_ns
    assert _ids(_waits(run_id)[0].traceparent) == (park.trace_id, park.span_id)

    # The answer (API): which response won, and the late one's 409
    wait_for(lambda: len(t.receiver.named("parkway.answer", **{"parkway.interaction_id": wait.id})) == 2,
             timeout=30, what="both answers' spans")  # fmt: skip
    answers = t.receiver.named("parkway.answer", **{"parkway.interaction_id": wait.id})
    outcomes = {s.attributes["parkway.response_id"]: s.attributes["parkway.outcome"] for s in answers}
    assert outcomes == {"r-1": "answered", "r-late": "conflict"}, outcomes
    won = next(s for s in answers if s.attributes["parkway.response_id"] == "r-1")
    assert won.attributes["parkway.principal"] == "tr-human"
    late = next(s for s in answers if s.attributes["parkway.response_id"] == "r-late")
    winner = (late.attributes.get("parkway.won_by"), late.attributes.get("parkway.won_response_id"))
    assert winner == ("tr-human", "r-1"), late.attributes

    # The continuation: a new trace (PARKWAY_TRACE_WAITS=link), linked to the park's span and the answer's
    resume = t.span("parkway.resume_step", **by_run)
    assert resume.kind == CONSUMER and resume.trace_id not in (step.trace_id, won.trace_id) and not resume.parent
    assert {(park.trace_id, park.span_id), (won.trace_id, won.span_id)} <= set(resume.links), resume.links
    assert resume.attributes["parkway.continuation"] == "trace.done@1"
    assert resume.attributes["parkway.outcome"] == "Complete" and resume.attributes["parkway.waits"] == "otp"
    assert resume.attributes["parkway.waited_s"] >= 0
    # its tool call (replay class, whether it possibly ran) and its commit
    tool = _in_trace(t, resume.trace_id, "parkway.tool")
    assert tool.parent == resume.span_id
    assert (tool.attributes["parkway.tool"], tool.attributes["parkway.replay"]) == ("notify", "safe")
    assert tool.attributes["parkway.possibly_ran"] is False and tool.attributes["parkway.replayed"] is False
    assert _in_trace(t, resume.trace_id, "parkway.commit").attributes["parkway.outcome"] == "Complete"

    # Each event carries the trace of the change it records: stored, in the API's events, on the run page
    traces = _event_traces(run_id)
    assert traces["run.created"] == start.trace_id and traces["step.parked"] == step.trace_id
    assert traces["interaction.answered"] == won.trace_id and traces["run.completed"] == resume.trace_id
    listed = t.http.get(f"/v1/runs/{run_id}/events", headers=t.auth("tr-agent")).json()["items"]
    assert {e["type"]: e["trace_id"] for e in listed} == traces
    page = _run_page(t, run_id)
    for trace_id in (start.trace_id, step.trace_id, won.trace_id, resume.trace_id):
        assert f'href="{TRACE_URL.format(trace_id=trace_id)}"' in page, trace_id

    # And no exported byte holds the sensitive answer, or a token
    exported = b"".join(t.receiver.raw)
    leaked = [role for role, secret in (("code", CODE), *t.tokens.items()) if secret.encode() in exported]
    assert leaked == []  # names what leaked, never its value


def test_an_approval_link__opened_under_tracing__its_token_is_in_no_exported_byte(traced: Traced) -> None:
    t = traced
    run_id = t.start()
    wait = _parked(run_id)
    made = t.http.post(f"/v1/interactions/{wait.id}/links", json={"principal": "tr-human"}, headers=t.auth("tr-admin"))
    assert made.status_code == 201, made.text
    token = made.json()["url"].rsplit("/", 1)[1]
    # When the person opens the link (a GET: it decides nothing), then the wait is answered over the API
    opened = t.http.get(f"/links/{token}")
    assert opened.status_code == 200, opened.text
    assert t.answer(wait.id).status_code == 200
    # Then the answer's span is exported (after the page's request, by the same process), and no exported byte
    # holds the link's token: its path is a bearer secret
    t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    wait_status(run_id, "completed", sweep=False)
    leaked = token.encode() in b"".join(t.receiver.raw)
    assert not leaked  # never the token itself in the output


def test_a_wait_of_seven_days__links_the_same_way_and_no_span_stays_open(traced: Traced) -> None:
    t = traced
    run_id = t.start()
    wait = _parked(run_id)
    park_context = _waits(run_id)[0].traceparent
    assert park_context is not None
    # A week passes on the database's clock (the clock every wait is judged by)
    pass_time(7 * 86400)
    assert t.answer(wait.id).status_code == 200
    wait_status(run_id, "completed", sweep=False)
    resume = t.span("parkway.resume_step", **{"parkway.run_id": run_id})
    won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    park_trace, park_span = _ids(park_context)
    assert {(park_trace, park_span), (won.trace_id, won.span_id)} <= set(resume.links)
    assert resume.attributes["parkway.waited_s"] >= 7 * 86400
    # No span of the decision lasted across the wait: each ended within a minute of its start
    mine = {park_trace, won.trace_id, resume.trace_id}
    for span in (s for s in t.receiver.spans if s.trace_id in mine):
        assert 0 <= span.end_ns - span.start_ns < 60 * 10**9, span


def test_parent_mode__a_resume_is_the_child_of_the_answer_that_made_it_due(traced: Traced) -> None:
    t = traced
    for worker in [w for w in t.stack.workers if w.alive()]:
        worker.kill()
    parent_mode = t.stack.start_worker(**t.env, PARKWAY_TRACE_WAITS="parent")
    try:
        run_id = t.start()
        wait = _parked(run_id)
        assert t.answer(wait.id).status_code == 200
        wait_status(run_id, "completed", sweep=False)
        resume = t.span("parkway.resume_step", **{"parkway.run_id": run_id})
        won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    finally:
        parent_mode.kill()
        t.stack.start_worker(**t.env)  # the module's worker again, in the default mode
    # The resume is in the answer's trace, its child; the park is still a link (and the answer is not one too)
    assert (resume.trace_id, resume.parent) == (won.trace_id, won.span_id)
    assert resume.links == [_ids(_waits(run_id)[0].traceparent)], resume.links


def test_a_worker_killed_in_a_body__the_redrive_links_to_the_first_attempt(traced: Traced, tmp_path: Path) -> None:
    t = traced
    flag = str(tmp_path / "go")
    run_id = t.start({"flag": flag})
    wait = _parked(run_id)
    assert t.answer(wait.id).status_code == 200
    # The continuation's first attempt is in its body when its worker is killed
    wait_for(lambda: Path(f"{flag}.running").exists(), timeout=30, what="the first attempt in its body")
    with transaction() as session:
        first = session.scalars(select(Continuation).where(Continuation.run_id == run_id,
                                                           Continuation.kind == "resume")).one()  # fmt: skip
    assert first.claimed_trace is not None
    for worker in [w for w in t.stack.workers if w.alive()]:
        worker.kill()
    # When a worker is back and the sweep re-drives it (its lease ran out on the database's clock)
    t.stack.start_worker(**t.env)  # the module's worker from now on
    pass_time(3600)
    app.send_task(SWEEP, queue=SWEEP_QUEUE)  # the sweep in the traced worker, as beat sends it
    wait_status(run_id, "completed", timeout=60, sweep=False)
    # Then the re-drive's span links to the first attempt's (which never ended: a killed process exports nothing)
    wait_for(lambda: t.receiver.named("parkway.resume_step", **{"parkway.run_id": run_id}), timeout=30,
             what="the re-drive's span")  # fmt: skip
    (redrive,) = t.receiver.named("parkway.resume_step", **{"parkway.run_id": run_id})
    assert _ids(first.claimed_trace) in redrive.links, (first.claimed_trace, redrive.links)
    assert redrive.attributes["parkway.attempt"] == 2

    # And the sweep's pass that re-drove it is a span of its own, naming what it re-drove
    def sweeps() -> list[Span]:
        return [s for s in t.receiver.named("parkway.sweep") if first.id in s.attributes.get("parkway.redriven", "")]

    wait_for(sweeps, timeout=30, what="the sweep's span")


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
        wait = _parked(run_id)
        assert t.answer(wait.id).status_code == 200
        wait_status(run_id, "completed", sweep=False)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    # The item was handed out in a span of a new trace, linked to the park's and the answer's
    lease = t.span("parkway.lease", **{"parkway.run_id": run_id})
    won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    assert {_ids(_waits(run_id)[0].traceparent), (won.trace_id, won.span_id)} <= set(lease.links)

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
    wait = _parked(run_id)
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
    assert _ids(first["traceparent"]) in redrive.links, (first["traceparent"], redrive.links)


def test_a_log_line_written_in_a_span__carries_its_trace_id_and_span_id(traced: Traced) -> None:
    t = traced
    run_id = t.start({"log": True})
    _parked(run_id)
    step = t.span("parkway.run_step", **{"parkway.run_id": run_id})

    def lines() -> list[dict[str, Any]]:
        text = "".join(w.text() for w in t.stack.workers)
        return [json.loads(line) for line in text.splitlines()
                if line.startswith("{") and LOGGED in line and run_id in line]  # fmt: skip

    wait_for(lines, timeout=30, what="the step body's log line")
    (line,) = lines()
    assert (line.get("trace_id"), line.get("span_id")) == (step.trace_id, step.span_id), line


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
    assert _ids(got["traceparent"]) == (pushed.trace_id, pushed.span_id)


PROBE_SETUP = """
import sys, threading, os
{setup}
print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk") or m.startswith("opentelemetry.exporter")))
print(sorted(t.name for t in threading.enumerate()))
"""


@pytest.mark.parametrize("unset", [{"OTEL_EXPORTER_OTLP_ENDPOINT": None}, {"OTEL_TRACES_EXPORTER": "none"}])
def test_without_otel__no_sdk_no_exporter_no_thread_in_the_api_or_a_worker_process(
    stack: Stack, unset: dict[str, str | None]
) -> None:
    # The API application as uvicorn imports it, and a worker's pool child as Celery starts it
    setups = {
        "api": "import api.app",
        "worker": "from celery import signals\nimport tasks.celery_app\n"
        "signals.worker_process_init.send(sender=None)\nimport tasks.worker",
    }
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", **unset, "OTEL_SERVICE_NAME": "probe"}
    for name, setup in setups.items():
        done = subprocess.run([sys.executable, "-c", PROBE_SETUP.format(setup=setup)], cwd=ROOT, text=True,
                              capture_output=True, timeout=60, env=child_env(stack.database_url, **env))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        modules, threads = done.stdout.strip().splitlines()[-2:]
        assert modules == "[]", f"{name}: {modules}"
        assert "OtelBatchSpanRecordProcessor" not in threads and "BatchSpanProcessor" not in threads, threads
    # And with the endpoint set, the same probe does set it up (what the check above would have seen)
    traced_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": None}
    done = subprocess.run([sys.executable, "-c", PROBE_SETUP.format(setup=setups["worker"])], cwd=ROOT, text=True,
                          capture_output=True, timeout=60, env=child_env(stack.database_url, **traced_env))  # fmt: skip
    assert "opentelemetry.sdk.trace" in done.stdout, done.stdout + done.stderr[-3000:]
