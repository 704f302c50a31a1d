"""Starting runs: registration, authority, idempotency keys."""

from __future__ import annotations

import pytest

from parkway.errors import NotRegistered
from tasks.sdk import Conflict, Forbidden, start_run
from tests.integration.helpers import Sent, add_principal, count_runs
from tests.support import AGENT, HUMAN, TARGET, continuations, event_types, run_row


def test_start_run__unknown_workflow_is_not_registered_and_stores_nothing(actors_db: str, sent: Sent) -> None:
    before = count_runs()
    with pytest.raises(NotRegistered):
        start_run("t.no_such_workflow", {}, principal=AGENT, target=TARGET)
    assert count_runs() == before
    assert sent.calls == []


def test_start_run__human_principal_is_forbidden(actors_db: str, sent: Sent) -> None:
    before = count_runs()
    with pytest.raises(Forbidden):
        start_run("t.after", {}, principal=HUMAN, target=TARGET)
    assert count_runs() == before
    assert sent.calls == []


def test_start_run__agent_without_grant_is_forbidden(actors_db: str) -> None:
    add_principal("bot-2", "agent")
    add_principal("bot-3", "agent", grant="team:other")
    before = count_runs()
    with pytest.raises(Forbidden):
        start_run("t.after", {}, principal="bot-2", target=TARGET)
    with pytest.raises(Forbidden):
        start_run("t.after", {}, principal="bot-3", target=TARGET)
    assert count_runs() == before


def test_start_run__unknown_principal_is_forbidden(actors_db: str) -> None:
    before = count_runs()
    with pytest.raises(Forbidden):
        start_run("t.after", {}, principal="ghost", target=TARGET)
    assert count_runs() == before


def test_start_run__creates_a_running_run_with_one_ready_start_continuation_published(
    actors_db: str, sent: Sent
) -> None:
    run_id = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET)
    run = run_row(run_id)
    assert (run.status, run.workflow, run.target, run.payload) == ("running", "t.after", TARGET, {"x": 1})
    (start,) = continuations(run_id)
    assert (start.kind, start.status, start.attempts) == ("start", "ready", 0)
    assert sent.ids() == [start.id]
    assert event_types(run_id) == ["run.created", "continuation.ready"]


def test_start_run__same_key_and_payload_returns_the_same_run_once(actors_db: str, sent: Sent) -> None:
    first = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET, idempotency_key="k-1")
    again = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET, idempotency_key="k-1")
    assert again == first
    assert count_runs() == 1
    assert len(continuations(first)) == 1
    assert len(sent.calls) == 1  # the retry publishes nothing new


def test_start_run__same_key_with_a_different_payload_is_a_conflict(actors_db: str) -> None:
    first = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET, idempotency_key="k-2")
    with pytest.raises(Conflict) as caught:
        start_run("t.after", {"x": 2}, principal=AGENT, target=TARGET, idempotency_key="k-2")
    assert caught.value.state is not None and caught.value.state["run_id"] == first
    with pytest.raises(Conflict):
        start_run("t.ask_one", {"x": 1}, principal=AGENT, target=TARGET, idempotency_key="k-2")
    assert count_runs() == 1


def test_start_run__different_owners_may_reuse_a_key(actors_db: str) -> None:
    add_principal("bot-2", "agent", grant=TARGET)
    mine = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET, idempotency_key="shared")
    theirs = start_run("t.after", {"x": 1}, principal="bot-2", target=TARGET, idempotency_key="shared")
    assert mine != theirs
    assert count_runs() == 2


def test_start_run__without_key_every_call_is_a_new_run(actors_db: str) -> None:
    a = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET)
    b = start_run("t.after", {"x": 1}, principal=AGENT, target=TARGET)
    assert a != b
    assert count_runs() == 2
