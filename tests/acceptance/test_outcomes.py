"""What a body returns, through a real worker: a malformed outcome is the workflow's own ``failed`` on the
first execution (never an error inside the commit, re-driven until given up), and a Park on a continuation
version nobody registered is ``interrupted`` naming it (the system cannot drive it; nothing guesses)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.status import RUN_TERMINAL
from models.tables import Run, Step
from parkway.db import transaction
from tests.support import Stack, continuations, effects, event_types, run_row, run_status, start, wait_for
from tests.workflows import MALFORMED

pytestmark = pytest.mark.usefixtures("own_workers")

# What the run's error must say, for each outcome of tests.workflows.MALFORMED.
EXPECTED_ERROR = {
    "expires-nan": "interaction go: expires_in must be positive seconds, at most 31622400 (366 days), not nan",
    "expires-inf": "interaction go: expires_in must be positive seconds, at most 31622400 (366 days), not inf",
    "expires-negative": "interaction go: expires_in must be positive seconds",
    "expires-367-days": "at most 31622400 (366 days), not 31708800",
    "schema-invalid": "question go has an invalid JSON Schema",
    "schema-not-object": "question go needs a JSON Schema object, not list",
    "target-nul": "the target of interaction go contains a NUL character",
    "snapshot-object": "the Park snapshot is not JSON-serializable ($.at: a object is not a JSON value)",
    "snapshot-nan": "the Park snapshot is not JSON-serializable ($[0]: nan is not a JSON number)",
    "result-nul": "the Complete result is not JSON-serializable ($.text: contains a NUL character)",
    "result-surrogate": "the Complete result is not JSON-serializable ($.text: contains a lone surrogate",
    "result-inf": "the Complete result is not JSON-serializable ($.score: inf is not a JSON number)",
    "next-payload-nul": "the Next payload is not JSON-serializable ($.text: contains a NUL character)",
    "fail-details-nan": "the Fail details is not JSON-serializable ($.score: nan is not a JSON number)",
    "raise-nul": "RuntimeError: bad \ufffd byte",
}


def _terminal(run_id: str) -> Run:
    wait_for(lambda: run_status(run_id) in RUN_TERMINAL, timeout=60, sweep=True, what=f"run {run_id} terminal")
    return run_row(run_id)


def _steps(run_id: str) -> list[Step]:
    with transaction() as session:
        return list(session.scalars(select(Step).where(Step.run_id == run_id).order_by(Step.seq)))


def test_malformed_outcome__fails_the_step_on_the_first_execution(stack: Stack) -> None:
    assert set(EXPECTED_ERROR) == set(MALFORMED)
    # Given a worker, and one run of each malformed outcome
    stack.start_worker()
    runs = {kind: start("t.malformed", {"kind": kind}) for kind in MALFORMED}
    # When each has ended
    ended = {kind: _terminal(run_id) for kind, run_id in runs.items()}
    # Then each is the workflow's own failure, with a clear error, decided by its one and only execution
    problems = []
    for kind, run in ended.items():
        run_id = runs[kind]
        seen = (run.status, run.error, run.reason)
        if run.status != "failed" or EXPECTED_ERROR[kind] not in (run.error or ""):
            problems.append(f"{kind}: (status, error, reason) = {seen!r}")
            continue
        attempts = [(c.kind, c.status, c.attempts) for c in continuations(run_id)]
        if attempts != [("start", "consumed", 1)]:
            problems.append(f"{kind}: continuations {attempts!r}, expected one consumed start on attempt 1")
        if [s.status for s in _steps(run_id)] != ["failed"]:
            problems.append(f"{kind}: steps {[s.status for s in _steps(run_id)]!r}")
        if event_types(run_id).count("run.failed") != 1 or effects(run_id, "malformed") != 0:
            problems.append(f"{kind}: events {event_types(run_id)!r}, effects {effects(run_id, 'malformed')}")
    assert not problems, "\n".join(problems)


def test_park_on_a_version_no_worker_runs__interrupted_naming_it_once_the_grace_passed(stack: Stack) -> None:
    # Given a worker that knows t.one_done@1 only
    stack.start_worker()
    # When a step parks on t.one_done@9, which no worker has ever advertised
    run_id = start("t.ask_one", {"continuation": "t.one_done@9"})
    run = _terminal(run_id)
    # Then, a grace after it parked, the step and run are interrupted with a reason naming the missing
    # name@version, not failed
    assert (run.status, run.error) == ("interrupted", None)
    assert run.reason == "continuation version t.one_done@9: no live worker has ever advertised it"
    [step] = _steps(run_id)
    assert step.status == "interrupted" and step.reason == run.reason
    assert [(c.kind, c.status, c.attempts) for c in continuations(run_id)] == [("start", "consumed", 1)]
    types = event_types(run_id)
    assert "step.interrupted" in types and types.count("run.interrupted") == 1
    assert "run.failed" not in types and types.count("step.parked") == 1
