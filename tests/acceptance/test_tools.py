"""The tool-call journal with real worker processes and real kills: side effects never replayed."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from models.tables import ToolCall
from parkway.db import open_transaction, transaction
from tasks.sdk import Permission, answer
from tasks.tools import request_id
from tests.acceptance.seeding import SharedWorker
from tests.support import (
    BACKEND_STATE,
    HUMAN,
    TARGET,
    WAITING_ON_A_LOCK,
    Stack,
    effects,
    event_types,
    interactions,
    new_response_id,
    read_now,
    run_row,
    run_status,
    start,
    wait_for,
    wait_parked,
    wait_status,
)


@pytest.fixture(scope="module")
def shared(stack: Stack) -> SharedWorker:
    """The worker of the tests that need one and nothing more, and of the re-drives (one start, not one a
    test); one process, as the tests of a stopped worker want it (their executions one at a time)."""
    return SharedWorker(stack, concurrency=1)


@pytest.fixture(autouse=True)
def tidy(shared: SharedWorker) -> Iterator[None]:
    """No worker of a test outlives it (a leftover would take the next test's messages)."""
    shared.tidy()
    yield
    shared.tidy()


def calls(run_id: str) -> dict[str, ToolCall]:
    with transaction() as session:
        return {c.key: c for c in session.scalars(select(ToolCall).where(ToolCall.run_id == run_id))}


GUARDED = {"cmd": "deploy api", "resources": ["host:a", "host:b"]}  # a run of t.guarded, behind a permission

# A crashing worker's lease: a message delivered again while the dead execution's claim holds is a duplicate, so
# no run crashes twice before the last of them crashed once (the suite's 2 s can run one again under load).
CRASH_LEASE_S = "6"


@pytest.fixture(scope="module")
def redriven(stack: Stack, shared: SharedWorker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The runs of the tests below whose worker dies mid-step, by test, each died as that test says: one
    crashing worker for each crash point, the last of which also runs the kill tests' runs, killed with it
    before they reach its crash point (the step's commit; they wait for flags touched only once it is dead):
    not a worker to die and another to restart for each test. Then the shared worker re-drives them all, as a
    restarted one would."""
    stack.stop_all()
    never, safe = {"replay": "never"}, {"replay": "safe"}
    runs = _crashed(stack, "tool.after_intent", {"never_after_intent": ("t.tool", never)})
    runs |= _crashed(stack, "tool.after_run", {"never_after_run": ("t.tool", never), "safe_after_run": ("t.tool", safe),
                                               "lookup": ("t.tool", {**never, "cmd": "secret-arg-42"})})  # fmt: skip
    flags = tmp_path_factory.mktemp("flags")
    killed = {"three_tools": ("t.three_tools", {"wait_for": str(flags / "third")}),
              "args_change": ("t.args_change", {"wait_for": str(flags / "go")})}  # fmt: skip
    runs |= _crashed(stack, "resume.before_commit", {"preflight": ("t.guarded", GUARDED)}, killed, midway=_midway)
    for flag in ("third", "go"):
        (flags / flag).touch()
    shared.worker()
    return runs


Started = dict[str, tuple[str, dict[str, object]]]  # by test: the workflow and payload of its run


def _crashed(
    stack: Stack,
    point: str,
    crashing: Started,
    killed: Started | None = None,
    *,
    midway: Callable[[dict[str, str]], None] | None = None,
) -> dict[str, str]:
    """Runs started on a worker that exits at ``point`` (``PARKWAY_CRASH_AT``), once each of ``crashing``
    crashed there and ``midway`` holds of the ``killed`` ones; the worker killed (its pool would crash the
    next one too), and what it held left to the sweep to send again once the lease ran out (wait_status
    sweeps)."""
    runs = {**crashing, **(killed or {})}
    worker = stack.start_worker(concurrency=len(runs), PARKWAY_CRASH_AT=point, PARKWAY_CLAIM_LEASE_S=CRASH_LEASE_S)
    started = {test: start(workflow, payload) for test, (workflow, payload) in runs.items()}
    line = f"crash point {point} reached"
    wait_for(lambda: worker.text().count(line) >= len(crashing), what=f"{len(crashing)} crashes at {point}")
    if midway is not None:
        midway(started)
    worker.kill()
    stack.flush_broker()
    return started


def _midway(runs: dict[str, str]) -> None:
    """The kill tests' runs where their tests kill them: the third tool's step after the second tool, the
    same-key step after its first execution's tool. The effect commits before the journal records its
    outcome: kill only once that is settled too (a kill between the two rightly leaves the second tool
    "possibly ran", which is another test's case)."""
    wait_for(lambda: effects(runs["three_tools"], "two") == 1, what="second tool ran")
    wait_for(lambda: _settled(runs["three_tools"], "two"), what="second tool settled")
    wait_for(lambda: effects(runs["args_change"], "args") == 1, what="first execution's tool ran")


def _settled(run_id: str, key: str) -> bool:
    return key in calls(run_id) and calls(run_id)[key].phase == "settled"


def test_never_tool__crash_after_intent__settles_possibly_ran_without_running(redriven: dict[str, str]) -> None:
    run_id = redriven["never_after_intent"]
    run = wait_status(run_id, "completed")
    assert "may have run before a crash" in run.result["possibly_ran"]
    assert effects(run_id, "tool") == 0
    call = calls(run_id)["apply"]
    assert (call.phase, call.possibly_ran) == ("settled", True)
    assert "toolcall.possibly_ran" in event_types(run_id)


def test_never_tool__crash_after_run__ran_once_and_never_again(redriven: dict[str, str]) -> None:
    run_id = redriven["never_after_run"]
    run = wait_status(run_id, "completed")
    assert "possibly_ran" in run.result
    assert effects(run_id, "tool") == 1
    assert calls(run_id)["apply"].possibly_ran


def test_safe_tool__crash_after_run__runs_again_and_completes(redriven: dict[str, str]) -> None:
    run_id = redriven["safe_after_run"]
    run = wait_status(run_id, "completed")
    assert run.result == {"out": "did tool"}
    assert effects(run_id, "tool") == 2
    call = calls(run_id)["apply"]
    assert (call.phase, call.possibly_ran, call.outcome) == ("settled", False, "did tool")


def test_three_tools__killed_after_the_second__only_the_third_runs_on_resume(redriven: dict[str, str]) -> None:
    run_id = redriven["three_tools"]
    run = wait_status(run_id, "completed")
    assert run.result == {"outs": ["did one", "did two", "did three"]}
    assert [effects(run_id, tag) for tag in ("one", "two", "three")] == [1, 1, 1]


def test_same_key_with_different_args__fails_closed(redriven: dict[str, str]) -> None:
    run_id = redriven["args_change"]
    run = wait_status(run_id, "failed")
    assert run.error is not None and "other arguments" in run.error
    assert effects(run_id, "args") == 1


def test_run_lookup__lists_tool_calls_without_their_arguments(redriven: dict[str, str]) -> None:
    from api.schemas import RunOut
    from models import access

    run_id = redriven["lookup"]
    wait_status(run_id, "completed")
    with transaction() as session:
        run = access.get_run(session, run_id)
        assert run is not None
        shown = RunOut.of(access.run_view(session, run)).model_dump(mode="json")
    assert shown["tool_calls"] == [
        {
            "key": "apply",
            "name": "effect",
            "phase": "settled",
            "replay": "never",
            "possibly_ran": True,
            "outcome": "error: possibly ran before a crash; not run again",
        }
    ]
    assert "secret-arg-42" not in repr(shown)


def _permission(run_id: str) -> object:
    [(key, asked)] = [(k, i) for k, i in interactions(run_id).items() if i.status == "pending"]
    assert key == "tool:apply:shell.exec"
    return asked


@pytest.mark.parametrize("restart", [False, True])
def test_permission_preflight__approved_runs_the_effect_once(
    stack: Stack, shared: SharedWorker, request: pytest.FixtureRequest, restart: bool
) -> None:
    # Given a worker that dies right before committing the park (a restart while authorizing: redriven's)
    if restart:
        run_id = request.getfixturevalue("redriven")["preflight"]
    else:
        shared.worker()
        run_id = start("t.guarded", GUARDED)
    asked = wait_parked(run_id)
    # Then it rejoined one deterministic request, and nothing ran before the approval
    step_id = calls(run_id)["apply"].step_id
    expected = request_id(step_id, "apply", Permission("p", "shell.exec", ["host:b", "host:a"], TARGET))
    assert next(iter(asked.values())).id == expected
    assert calls(run_id)["apply"].phase == "authorizing" and effects(run_id, "guarded") == 0
    if restart:
        stack.stop_all()
        shared.worker()
    answer(expected, {"approved": True}, response_id=new_response_id(), principal=HUMAN)
    run = wait_status(run_id, "completed")
    assert run.result == {"out": "did guarded"}
    assert effects(run_id, "guarded") == 1
    assert calls(run_id)["apply"].phase == "settled"


def test_permission_preflight__rejected_settles_without_running(shared: SharedWorker) -> None:
    shared.worker()
    run_id = start("t.guarded", {"cmd": "rm -rf /", "resources": ["host:a"]})
    wait_parked(run_id)
    asked = _permission(run_id)
    answer(asked.id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]
    run = wait_status(run_id, "completed")
    assert "permission rejected" in run.result["rejected"]
    assert effects(run_id, "guarded") == 0
    assert calls(run_id)["apply"].error == "permission rejected"


def test_permission_preflight__changed_resource_set_asks_afresh(shared: SharedWorker, tmp_path: Path) -> None:
    target_file = tmp_path / "resources"
    shared.worker()
    run_id = start("t.guarded", {"cmd": "deploy", "resources": ["host:a"], "resources_file": str(target_file)})
    wait_parked(run_id)
    first = _permission(run_id)
    # When the body's target changes before it runs again, an approval of the old set does not carry over
    target_file.write_text("host:b")
    answer(first.id, {"approved": True}, response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]

    def new_request() -> object:
        pending = [i for i in interactions(run_id).values() if i.status == "pending"]
        return pending[0] if pending else None

    second = wait_for(new_request, sweep=True, what="a new permission request")
    assert second.id != first.id and second.resources == ["host:b"]  # type: ignore[attr-defined]
    assert effects(run_id, "guarded") == 0
    answer(second.id, {"approved": True}, response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]
    wait_status(run_id, "completed")
    assert effects(run_id, "guarded") == 1


ENDED = re.compile(r"succeeded in [\d.]+s: '(lost|released|committed)'")


def test_never_tool__an_execution_that_lost_its_claim_starts_no_more_tool_calls(
    shared: SharedWorker, tmp_path: Path
) -> None:
    # Given a worker stopped while the effect of a run's first never tool runs (its second not reached)
    # (the shared one, alone since tidy: its log read from here on, what it logged before is not this run's)
    flag = tmp_path / "go"
    hung = shared.worker()
    since = len(hung.text())
    run_id = start("t.stuck_tool", {"wait_for": str(flag)})
    wait_for(lambda: "first" in calls(run_id), timeout=60, what="the first tool call journaled")
    os.killpg(hung.proc.pid, signal.SIGSTOP)
    try:
        # When its lease runs out and another worker re-drives the run, which fails: the first may have run
        shared.successor()
        run = wait_for(lambda: run_status(run_id) == "failed" and run_row(run_id), timeout=60, sweep=True,
                       what="the re-drive ending the run")  # fmt: skip
        assert "possibly ran" in (run.error or "")
        # And then the stopped worker goes on
        flag.touch()
        os.killpg(hung.proc.pid, signal.SIGCONT)
        ended = wait_for(lambda: ENDED.search(hung.text()[since:]), timeout=30, what="the stopped execution's end")
    finally:
        hung.kill()
    # Then it started nothing more: the run's second tool was never journaled, its effect never ran
    assert "second" not in calls(run_id) and effects(run_id, "second") == 0
    assert ended.group(1) == "released", hung.text()[-3000:]
    assert run_status(run_id) == "failed"


def test_tool_call__its_session_ended_under_it__is_re_driven_not_failed(shared: SharedWorker) -> None:
    # Given a worker whose tool call's journal write waits on a lock, stopped right there, until PostgreSQL
    # ends its session (idle in a transaction for twice the lease): the only one (tidy stopped any other), its
    # log read from here on (what it logged for earlier tests is not this execution's)
    worker = shared.worker()
    since = len(worker.text())
    with open_transaction() as conn:
        conn.execute(text("LOCK TABLE tool_calls IN EXCLUSIVE MODE"))
        run_id = start("t.tool")
        like = "%INSERT INTO tool_calls%"
        backend = wait_for(lambda: read_now(WAITING_ON_A_LOCK, like=like), timeout=60, what="the journal write")
        os.killpg(worker.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: read_now(BACKEND_STATE, pid=backend) is None, timeout=30, what="its session ended")
        # When the worker goes on (no sweep yet), its write fails with the database's error
        os.killpg(worker.proc.pid, signal.SIGCONT)
        ended = wait_for(lambda: ENDED.search(worker.text()[since:]), timeout=30, what="that execution's end")
        # Then that execution is released, not the run failed: re-driven, the effect runs once, the run completes
        run = wait_for(lambda: run_status(run_id) in ("completed", "failed") and run_row(run_id), timeout=60,
                       sweep=True, what="the run ended")  # fmt: skip
    finally:
        worker.kill()
    assert run.status == "completed", run.error
    assert ended.group(1) == "released" and "execution stopped" in worker.text()[since:]
    assert effects(run_id, "tool") == 1
