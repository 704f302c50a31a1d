"""The tool-call journal with real worker processes and real kills: side effects never replayed."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from sqlalchemy import select, text

from models.tables import ToolCall
from parkway.db import open_transaction, transaction
from tasks.sdk import Permission, answer
from tasks.tools import request_id
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

pytestmark = pytest.mark.usefixtures("own_workers")


def calls(run_id: str) -> dict[str, ToolCall]:
    with transaction() as session:
        return {c.key: c for c in session.scalars(select(ToolCall).where(ToolCall.run_id == run_id))}


def _crash_then_restart(stack: Stack, point: str, workflow: str, payload: dict[str, object]) -> str:
    crashing = stack.start_worker(PARKWAY_CRASH_AT=point)
    run_id = start(workflow, payload)
    wait_for(lambda: f"crash point {point} reached" in crashing.text(), what=f"crash at {point}")
    crashing.kill()
    stack.start_worker()
    return run_id


def test_never_tool__crash_after_intent__settles_possibly_ran_without_running(stack: Stack) -> None:
    run_id = _crash_then_restart(stack, "tool.after_intent", "t.tool", {"replay": "never"})
    run = wait_status(run_id, "completed")
    assert "may have run before a crash" in run.result["possibly_ran"]
    assert effects(run_id, "tool") == 0
    call = calls(run_id)["apply"]
    assert (call.phase, call.possibly_ran) == ("settled", True)
    assert "toolcall.possibly_ran" in event_types(run_id)


def test_never_tool__crash_after_run__ran_once_and_never_again(stack: Stack) -> None:
    run_id = _crash_then_restart(stack, "tool.after_run", "t.tool", {"replay": "never"})
    run = wait_status(run_id, "completed")
    assert "possibly_ran" in run.result
    assert effects(run_id, "tool") == 1
    assert calls(run_id)["apply"].possibly_ran


def test_safe_tool__crash_after_run__runs_again_and_completes(stack: Stack) -> None:
    run_id = _crash_then_restart(stack, "tool.after_run", "t.tool", {"replay": "safe"})
    run = wait_status(run_id, "completed")
    assert run.result == {"out": "did tool"}
    assert effects(run_id, "tool") == 2
    call = calls(run_id)["apply"]
    assert (call.phase, call.possibly_ran, call.outcome) == ("settled", False, "did tool")


def test_three_tools__killed_after_the_second__only_the_third_runs_on_resume(stack: Stack, tmp_path: Path) -> None:
    flag = tmp_path / "third"
    worker = stack.start_worker()
    run_id = start("t.three_tools", {"wait_for": str(flag)})
    # The effect commits before the journal records its outcome: kill only once that is settled too (a kill
    # between the two rightly leaves the second tool "possibly ran", which is another test's case).
    wait_for(lambda: effects(run_id, "two") == 1, what="second tool ran")
    wait_for(lambda: "two" in calls(run_id) and calls(run_id)["two"].phase == "settled", what="second tool settled")
    worker.kill()
    flag.touch()
    stack.start_worker()
    run = wait_status(run_id, "completed")
    assert run.result == {"outs": ["did one", "did two", "did three"]}
    assert [effects(run_id, tag) for tag in ("one", "two", "three")] == [1, 1, 1]


def _permission(run_id: str) -> object:
    [(key, asked)] = [(k, i) for k, i in interactions(run_id).items() if i.status == "pending"]
    assert key == "tool:apply:shell.exec"
    return asked


@pytest.mark.parametrize("restart", [False, True])
def test_permission_preflight__approved_runs_the_effect_once(stack: Stack, restart: bool) -> None:
    # Given a worker that dies right before committing the park (a restart while authorizing)
    first = stack.start_worker(PARKWAY_CRASH_AT="resume.before_commit" if restart else None)
    run_id = start("t.guarded", {"cmd": "deploy api", "resources": ["host:a", "host:b"]})
    if restart:
        wait_for(lambda: "crash point resume.before_commit reached" in first.text(), what="crash before park")
        first.kill()
        stack.start_worker()
    asked = wait_parked(run_id)
    # Then it rejoined one deterministic request, and nothing ran before the approval
    step_id = calls(run_id)["apply"].step_id
    expected = request_id(step_id, "apply", Permission("p", "shell.exec", ["host:b", "host:a"], TARGET))
    assert next(iter(asked.values())).id == expected
    assert calls(run_id)["apply"].phase == "authorizing" and effects(run_id, "guarded") == 0
    if restart:
        stack.stop_all()
        stack.start_worker()
    answer(expected, {"approved": True}, response_id=new_response_id(), principal=HUMAN)
    run = wait_status(run_id, "completed")
    assert run.result == {"out": "did guarded"}
    assert effects(run_id, "guarded") == 1
    assert calls(run_id)["apply"].phase == "settled"


def test_permission_preflight__rejected_settles_without_running(stack: Stack) -> None:
    stack.start_worker()
    run_id = start("t.guarded", {"cmd": "rm -rf /", "resources": ["host:a"]})
    wait_parked(run_id)
    asked = _permission(run_id)
    answer(asked.id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)  # type: ignore[attr-defined]
    run = wait_status(run_id, "completed")
    assert "permission rejected" in run.result["rejected"]
    assert effects(run_id, "guarded") == 0
    assert calls(run_id)["apply"].error == "permission rejected"


def test_permission_preflight__changed_resource_set_asks_afresh(stack: Stack, tmp_path: Path) -> None:
    target_file = tmp_path / "resources"
    stack.start_worker()
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


def test_same_key_with_different_args__fails_closed(stack: Stack, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    worker = stack.start_worker()
    run_id = start("t.args_change", {"wait_for": str(flag)})
    wait_for(lambda: effects(run_id, "args") == 1, what="first execution's tool ran")
    worker.kill()
    flag.touch()
    stack.start_worker()
    run = wait_status(run_id, "failed")
    assert run.error is not None and "other arguments" in run.error
    assert effects(run_id, "args") == 1


def test_run_lookup__lists_tool_calls_without_their_arguments(stack: Stack) -> None:
    from api.schemas import RunOut
    from models import access

    run_id = _crash_then_restart(stack, "tool.after_run", "t.tool", {"replay": "never", "cmd": "secret-arg-42"})
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


ENDED = re.compile(r"succeeded in [\d.]+s: '(lost|released|committed)'")


def test_never_tool__an_execution_that_lost_its_claim_starts_no_more_tool_calls(stack: Stack, tmp_path: Path) -> None:
    # Given a worker stopped while the effect of a run's first never tool runs (its second not reached)
    flag = tmp_path / "go"
    hung = stack.start_worker(concurrency=1)
    run_id = start("t.stuck_tool", {"wait_for": str(flag)})
    wait_for(lambda: "first" in calls(run_id), timeout=60, what="the first tool call journaled")
    os.killpg(hung.proc.pid, signal.SIGSTOP)
    try:
        # When its lease runs out and another worker re-drives the run, which fails: the first may have run
        stack.start_worker(concurrency=1)
        run = wait_for(lambda: run_status(run_id) == "failed" and run_row(run_id), timeout=60, sweep=True,
                       what="the re-drive ending the run")  # fmt: skip
        assert "possibly ran" in (run.error or "")
        # And then the stopped worker goes on
        flag.touch()
        os.killpg(hung.proc.pid, signal.SIGCONT)
        ended = wait_for(lambda: ENDED.search(hung.text()), timeout=30, what="the stopped execution's end")
    finally:
        hung.kill()
    # Then it started nothing more: the run's second tool was never journaled, its effect never ran
    assert "second" not in calls(run_id) and effects(run_id, "second") == 0
    assert ended.group(1) == "released", hung.text()[-3000:]
    assert run_status(run_id) == "failed"


def test_tool_call__its_session_ended_under_it__is_re_driven_not_failed(stack: Stack) -> None:
    # Given a worker whose tool call's journal write waits on a lock, stopped right there, until PostgreSQL
    # ends its session (idle in a transaction for twice the lease)
    worker = stack.start_worker(concurrency=1)
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
        ended = wait_for(lambda: ENDED.search(worker.text()), timeout=30, what="that execution's end")
        # Then that execution is released, not the run failed: re-driven, the effect runs once, the run completes
        run = wait_for(lambda: run_status(run_id) in ("completed", "failed") and run_row(run_id), timeout=60,
                       sweep=True, what="the run ended")  # fmt: skip
    finally:
        worker.kill()
    assert run.status == "completed", run.error
    assert ended.group(1) == "released" and "execution stopped" in worker.text()
    assert effects(run_id, "tool") == 1
