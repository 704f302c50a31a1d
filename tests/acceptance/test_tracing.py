"""One trace per decision (issue 44): a real OTLP/HTTP receiver behind a real stack (uvicorn and a Celery
worker, each exporting with the SDK): the spans of a decision, their attributes and links across the wait,
never a sensitive value; a wait of days on the database's clock; a re-drive after a worker was killed in a
body; and with no ``OTEL_*``, nothing set up at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from models.tables import Continuation, Event
from parkway.db import transaction
from tasks.celery_app import SWEEP, SWEEP_QUEUE, app
from tests.acceptance.otlp_receiver import Span
from tests.acceptance.trace_workflows import ASK, LOGGED
from tests.acceptance.tracing_support import (
    CODE,
    CONSUMER,
    SERVER,
    TRACE_URL,
    Traced,
    ids_of,
    in_trace,
    parked,
    traced,
    waits,
)
from tests.pages.conftest import Forms
from tests.support import ROOT, Stack, child_env, pass_time, wait_for, wait_status

__all__ = ["traced"]  # the module's stack (tests/acceptance/tracing_support.py)


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


def test_a_decision__its_spans_attributes_and_links_across_the_wait(traced: Traced) -> None:
    t = traced
    run_id = t.start()
    wait = parked(run_id)
    answered = t.answer(wait.id)
    assert answered.status_code == 200, answered.text
    again = t.answer(wait.id, response_id="r-late")  # a second response: 409, and its span says so
    assert again.status_code == 409, again.text
    wait_status(run_id, "completed", sweep=False)
    by_run = {"parkway.run_id": run_id}

    # The run's start (API), in the trace of its HTTP request
    start = t.span("parkway.run.start", **by_run)
    assert start.attributes["parkway.workflow"] == ASK and start.attributes["parkway.principal"] == "tr-agent"
    # (its parent ends after the response is sent: it may come in a later export than its child)
    http_start = wait_for(lambda: [s for s in t.receiver.spans if s.span_id == start.parent], timeout=30,
                          what="the start's HTTP span")  # fmt: skip
    assert http_start and http_start[0].kind == SERVER and http_start[0].service == "parkway-api"

    # The step body's execution: a consumer span of its own trace, linked to the start; its commit and the
    # park inside it, ended with the commit, and the park's context stored on the wait
    step = t.span("parkway.run_step", **by_run)
    assert step.kind == CONSUMER and step.service == "parkway-worker" and step.trace_id != start.trace_id
    assert (start.trace_id, start.span_id) in step.links
    assert step.attributes["parkway.step"] == ASK and step.attributes["parkway.principal"] == "tr-agent"
    assert step.attributes["parkway.outcome"] == "Park"
    commit = in_trace(t, step.trace_id, "parkway.commit")
    park = in_trace(t, step.trace_id, "parkway.park")
    assert commit.parent == step.span_id and park.parent == commit.span_id
    assert park.attributes["parkway.waits"] == "otp" and park.end_ns <= commit.end_ns <= step.end_ns
    assert ids_of(waits(run_id)[0].traceparent) == (park.trace_id, park.span_id)

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
    assert "parkway.kind" not in resume.attributes  # its name says it: each attribute is paid per execution
    # its tool call (replay class, whether it possibly ran) and its commit
    tool = in_trace(t, resume.trace_id, "parkway.tool")
    assert tool.parent == resume.span_id
    assert (tool.attributes["parkway.tool"], tool.attributes["parkway.replay"]) == ("notify", "safe")
    assert tool.attributes["parkway.possibly_ran"] is False and tool.attributes["parkway.replayed"] is False
    assert in_trace(t, resume.trace_id, "parkway.commit").attributes["parkway.outcome"] == "Complete"

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
    wait = parked(run_id)
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
    wait = parked(run_id)
    park_context = waits(run_id)[0].traceparent
    assert park_context is not None
    # A week passes on the database's clock (the clock every wait is judged by)
    pass_time(7 * 86400)
    assert t.answer(wait.id).status_code == 200
    wait_status(run_id, "completed", sweep=False)
    resume = t.span("parkway.resume_step", **{"parkway.run_id": run_id})
    won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    park_trace, park_span = ids_of(park_context)
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
        wait = parked(run_id)
        assert t.answer(wait.id).status_code == 200
        wait_status(run_id, "completed", sweep=False)
        resume = t.span("parkway.resume_step", **{"parkway.run_id": run_id})
        won = t.span("parkway.answer", **{"parkway.interaction_id": wait.id})
    finally:
        parent_mode.kill()
        t.stack.start_worker(**t.env)  # the module's worker again, in the default mode
    # The resume is in the answer's trace, its child; the park is still a link (and the answer is not one too)
    assert (resume.trace_id, resume.parent) == (won.trace_id, won.span_id)
    assert resume.links == [ids_of(waits(run_id)[0].traceparent)], resume.links


def test_a_worker_killed_in_a_body__the_redrive_links_to_the_first_attempt(traced: Traced, tmp_path: Path) -> None:
    t = traced
    flag = str(tmp_path / "go")
    run_id = t.start({"flag": flag})
    wait = parked(run_id)
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
    assert ids_of(first.claimed_trace) in redrive.links, (first.claimed_trace, redrive.links)
    assert redrive.attributes["parkway.attempt"] == 2

    # And the sweep's pass that re-drove it is a span of its own, naming what it re-drove
    def sweeps() -> list[Span]:
        return [s for s in t.receiver.named("parkway.sweep") if first.id in s.attributes.get("parkway.redriven", "")]

    wait_for(sweeps, timeout=30, what="the sweep's span")


def test_a_log_line_written_in_a_span__carries_its_trace_id_and_span_id(traced: Traced) -> None:
    t = traced
    run_id = t.start({"log": True})
    parked(run_id)
    step = t.span("parkway.run_step", **{"parkway.run_id": run_id})

    def lines() -> list[dict[str, Any]]:
        text = "".join(w.text() for w in t.stack.workers)
        return [json.loads(line) for line in text.splitlines()
                if line.startswith("{") and LOGGED in line and run_id in line]  # fmt: skip

    wait_for(lines, timeout=30, what="the step body's log line")
    (line,) = lines()
    assert (line.get("trace_id"), line.get("span_id")) == (step.trace_id, step.span_id), line


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
