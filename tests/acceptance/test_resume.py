"""The heart, end to end: park, answer, resume exactly once, on real worker processes."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from parkway.db import transaction
from tasks.publish import publish
from tasks.sdk import answer
from tests.integration.helpers import events, step
from tests.support import (
    HUMAN,
    Stack,
    continuations,
    effects,
    event_types,
    new_response_id,
    run_status,
    settings_env,
    start,
    wait_for,
    wait_parked,
    wait_status,
)


@pytest.fixture(scope="module")
def worker(stack: Stack):  # type: ignore[no-untyped-def]
    return stack.start_worker()


def test_resume__second_answer_makes_one_continuation_due_and_run_completes(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    # Given a run parked on two questions
    run_id = start("t.ask_two", {"service": "billing"})
    asked = wait_parked(run_id)
    assert set(asked) == {"window", "reason"}
    before = [c.kind for c in continuations(run_id)]
    assert before == ["start"]

    # When the first is answered, nothing becomes due
    answer(asked["window"].id, "tonight", response_id=new_response_id(), principal=HUMAN)
    assert [c.kind for c in continuations(run_id)] == ["start"]
    assert wait_status(run_id, "waiting", sweep=False)

    # When the second is answered, exactly one continuation becomes due, runs, and completes the run
    answer(asked["reason"].id, "maintenance", response_id=new_response_id(), principal=HUMAN)
    run = wait_status(run_id, "completed")
    assert run.result == {
        "service": "billing",
        "window": "tonight",
        "window_status": "answered",
        "reason": "maintenance",
        "by": HUMAN,
    }
    assert run.completed_at is not None
    assert [c.kind for c in continuations(run_id)] == ["start", "resume"]
    assert all(c.status == "consumed" for c in continuations(run_id))
    assert effects(run_id) == 1
    types = event_types(run_id)
    assert types.count("run.completed") == 1
    assert types.index("interaction.answered") < types.index("step.completed")
    # The parked step's continuation resumed it (the run-ending commit): ready, resumed, completed, ended
    last_answer = len(types) - 1 - types[::-1].index("interaction.answered")
    assert types[last_answer + 1 :] == ["continuation.ready", "step.resumed", "step.completed", "run.completed"]
    _assert_resumed(run_id)


def test_next__becomes_its_own_continuation_and_runs(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    run_id = start("t.ask_one", {"then": "t.after"})
    asked = wait_parked(run_id)
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    run = wait_status(run_id, "completed")
    assert run.result == {"after": {"go": "yes"}}
    assert [c.kind for c in continuations(run_id)] == ["start", "resume", "start"]
    assert effects(run_id, "after") == 1
    # Resumed, then handed over to the next step (the generic commit), which starts and ends the run
    types = event_types(run_id)
    assert types[types.index("interaction.answered") + 1 :] == [
        "continuation.ready", "step.resumed", "step.completed", "continuation.ready", "step.completed",
        "run.completed",
    ]  # fmt: skip
    _assert_resumed(run_id)


def _assert_resumed(run_id: str) -> None:
    """One ``step.resumed``, naming the parked step and the resume continuation that committed it."""
    resumed = [data for type_, data in events(run_id) if type_ == "step.resumed"]
    resume = [c for c in continuations(run_id) if c.kind == "resume"]
    assert len(resumed) == len(resume) == 1
    parked = step(resume[0].step_id)
    assert resumed[0] == {
        "run_id": run_id, "step_id": parked.id, "name": parked.name, "continuation_id": resume[0].id,
    }  # fmt: skip


def test_permission__rejected_reaches_the_continuation(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    run_id = start("t.permission", {"cmd": "rm -rf /tmp/x"})
    asked = wait_parked(run_id)
    receipt = answer(asked["shell"].id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)
    assert receipt["status"] == "rejected"
    run = wait_status(run_id, "completed")
    assert run.result == {"approved": False, "status": "rejected"}


def test_same_continuation_published_five_times__commits_once(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    # Given a second worker, so two processes race for the same deliveries
    stack.start_worker(concurrency=2)
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    answer(asked["go"].id, "x", response_id=new_response_id(), principal=HUMAN)
    resume = next(c for c in continuations(run_id) if c.kind == "resume")
    # When the same continuation is delivered four more times
    publish([(resume.id, "resume")] * 4)
    wait_status(run_id, "completed")
    # Then its commit happened once
    wait_for(lambda: all(c.status == "consumed" for c in continuations(run_id)), what="all consumed")
    assert effects(run_id) == 1
    assert event_types(run_id).count("run.completed") == 1


def test_body_exception__fails_the_run_with_its_text(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    run_id = start("t.fail")
    run = wait_status(run_id, "failed")
    assert run.error == "RuntimeError: the body broke"


def test_next_to_unregistered_step__waits_and_past_the_grace_is_interrupted_naming_it(  # type: ignore[no-untyped-def]
    stack: Stack, worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Next to a step no worker runs (`parkway check` reports t.does_not_exist) is not the workflow's verdict:
    # it waits like any continuation, and only the grace ends it (SPEC §6, "One meaning of served")
    run_id = start("t.bad_next")
    wait_for(lambda: "t.does_not_exist" in {c.name for c in continuations(run_id)}, what="the Next's continuation")
    assert run_status(run_id) == "running"
    with settings_env(monkeypatch, PARKWAY_VERSION_GRACE_S="1"):
        run = wait_status(run_id, "interrupted")
    assert run.error is None and "t.does_not_exist" in (run.reason or ""), run.reason
    assert "run.failed" not in event_types(run_id)


def test_park_on_a_retired_version__interrupted_at_once_with_a_clear_reason(stack: Stack, worker) -> None:  # type: ignore[no-untyped-def]
    # Given t.nowhere@1, last advertised by a worker an hour ago (a version a deploy retired)
    with transaction() as session:
        session.execute(text("INSERT INTO advertised_versions (kind, key, last_seen_at) "
                             "VALUES ('resume', 't.nowhere@1', now() - interval '1 hour')"))  # fmt: skip
    # When a step parks on it: not the workflow's verdict, the system cannot drive the wait, so the step is
    # interrupted, not failed, and never parks
    run_id = start("t.ask_one", {"continuation": "t.nowhere@1"})
    run = wait_status(run_id, "interrupted")
    assert (run.reason or "").startswith("continuation version t.nowhere@1: no live worker has advertised it since")
    assert (run.reason or "").endswith(" (step t.ask_one parked on it)")
    assert "step.parked" not in event_types(run_id)
