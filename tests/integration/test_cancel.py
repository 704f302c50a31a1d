"""Cancel: ends the whole parked step, its pending siblings and the run, in one transaction."""

from __future__ import annotations

from functools import partial

import pytest
from sqlalchemy import literal_column, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from models.store import interactions as store_interactions
from tasks.sdk import Conflict, Forbidden, Gone, cancel
from tasks.sdk import answer as sdk_answer
from tests.integration.helpers import Sent, answer_in, events, interaction, parked, step, while_held
from tests.support import HUMAN, STRANGER, Stack, continuations, event_types, new_response_id, run_row


def test_cancel__pending_interaction_cancels_siblings_step_and_run(stack: Stack, sent: Sent) -> None:
    # Given a run parked on two pending questions
    run_id, asked = parked("t.ask_two")
    before = len(event_types(run_id))
    sent.clear()

    # When one of them is canceled
    rid = new_response_id()
    receipt = cancel(asked["reason"].id, response_id=rid, principal=HUMAN, reason="not needed any more")

    # Then both questions, the step and the run are canceled, with the reason
    assert receipt["status"] == "canceled" and receipt["response_id"] == rid
    assert receipt["canceled_at"] is not None
    for key in ("window", "reason"):
        assert interaction(asked[key].id).status == "canceled"
    assert step(asked["window"].step_id).status == "canceled"
    run = run_row(run_id)
    assert run.status == "canceled"
    assert run.reason == "not needed any more"
    assert run.completed_at is not None
    assert run.completed_at >= receipt["canceled_at"]

    # And the log has one interaction.canceled per question and one run.canceled
    added = events(run_id)[before:]
    types = [t for t, _ in added]
    assert types.count("interaction.canceled") == 2
    assert types.count("run.canceled") == 1
    assert {d["interaction_id"] for t, d in added if t == "interaction.canceled"} == {
        asked["window"].id,
        asked["reason"].id,
    }
    assert types.index("run.canceled") > max(i for i, t in enumerate(types) if t == "interaction.canceled")

    # And no continuation was created or published
    assert [c.kind for c in continuations(run_id)] == ["start"]
    assert sent.calls == []


def test_cancel__answered_sibling_stays_answered(stack: Stack) -> None:
    # Given one of two questions answered
    run_id, asked = parked("t.ask_two")
    first = sdk_answer(asked["window"].id, "now", response_id=new_response_id(), principal=HUMAN)

    # When the other is canceled
    cancel(asked["reason"].id, response_id=new_response_id(), principal=HUMAN)

    # Then the answered one keeps its status and value; only the pending one is canceled
    window = interaction(asked["window"].id)
    assert window.status == "answered" and window.value == "now"
    assert interaction(asked["reason"].id).status == "canceled"
    assert run_row(run_id).status == "canceled"
    assert run_row(run_id).reason  # a default reason names who canceled
    assert event_types(run_id).count("interaction.canceled") == 1
    assert [c.kind for c in continuations(run_id)] == ["start"]

    # And the accepted answer's exact retry still gets its receipt; anything else on it is a 409
    assert sdk_answer(asked["window"].id, "now", response_id=first["response_id"], principal=HUMAN) == first
    with pytest.raises(Conflict):
        sdk_answer(asked["window"].id, "tonight", response_id=new_response_id(), principal=HUMAN)


def test_cancel__exact_retry_returns_the_same_receipt_and_changes_nothing(stack: Stack) -> None:
    run_id, asked = parked("t.ask_two")
    rid = new_response_id()
    first = cancel(asked["window"].id, response_id=rid, principal=HUMAN, reason="dup")
    after_first = event_types(run_id)

    again = cancel(asked["window"].id, response_id=rid, principal=HUMAN, reason="dup")

    assert again == first
    assert event_types(run_id) == after_first


def test_cancel__another_cancel_after_it_is_gone(stack: Stack) -> None:
    _, asked = parked("t.ask_two")
    cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)
    with pytest.raises(Gone) as caught:
        cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None and caught.value.state["status"] == "canceled"


@pytest.mark.parametrize("key", ["window", "reason"])
def test_cancel__answer_afterwards_is_gone_with_run_status(stack: Stack, key: str) -> None:
    _, asked = parked("t.ask_two")
    cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)

    with pytest.raises(Gone) as caught:
        sdk_answer(asked[key].id, "now", response_id=new_response_id(), principal=HUMAN)

    state = caught.value.state
    assert state is not None
    assert state["id"] == asked[key].id
    assert state["status"] == "canceled"
    assert state["run_status"] == "canceled"
    assert interaction(asked[key].id).value is None


def test_cancel__answered_interaction_is_a_conflict_and_cancels_nothing(stack: Stack) -> None:
    run_id, asked = parked("t.ask_two")
    sdk_answer(asked["window"].id, "now", response_id=new_response_id(), principal=HUMAN)
    before = event_types(run_id)

    with pytest.raises(Conflict) as caught:
        cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)

    assert caught.value.state is not None and caught.value.state["status"] == "answered"
    assert interaction(asked["reason"].id).status == "pending"
    assert run_row(run_id).status == "waiting"
    assert event_types(run_id) == before


def test_cancel__one_that_waited_for_the_step_lock_while_the_run_ended_is_gone(stack: Stack) -> None:
    # Given a step parked on two questions
    run_id, asked = parked("t.ask_two")
    before = event_types(run_id)

    def end_the_run(session: Session) -> None:
        session.execute(text("SELECT id FROM steps WHERE id = :sid FOR UPDATE"), {"sid": asked["window"].step_id})
        session.execute(text("UPDATE runs SET status = 'interrupted' WHERE id = :rid"), {"rid": run_id})

    # When one is canceled while a transaction holding the step's lock ends the run (the cancel's read, taken
    # before its wait for the lock, shows the run waiting)
    with pytest.raises(Gone) as caught:
        while_held(end_the_run, partial(cancel, asked["window"].id, response_id=new_response_id(), principal=HUMAN))

    # Then it is refused as gone, and nothing of it was written
    assert caught.value.state is not None and caught.value.state["run_status"] == "interrupted"
    assert {interaction(i.id).status for i in asked.values()} == {"pending"}
    assert step(asked["window"].step_id).status == "parked"
    assert event_types(run_id) == before


def test_cancel__one_that_waited_for_the_step_lock_while_its_question_was_answered_is_a_conflict(
    stack: Stack,
) -> None:
    # Given a step parked on two questions
    run_id, asked = parked("t.ask_two")
    before = event_types(run_id)

    # When one is canceled while it is being answered in a transaction that holds the step's lock (the
    # cancel's read, taken before its wait for the lock, shows it pending)
    with pytest.raises(Conflict) as caught:
        while_held(
            lambda session: answer_in(session, asked["window"].id, "now"),
            partial(cancel, asked["window"].id, response_id=new_response_id(), principal=HUMAN),
        )

    # Then the cancel tells what won, and cancels nothing: the sibling, the step and the run go on waiting
    assert caught.value.state is not None and caught.value.state["status"] == "answered"
    assert interaction(asked["reason"].id).status == "pending"
    assert step(asked["window"].step_id).status == "parked"
    assert run_row(run_id).status == "waiting"
    assert event_types(run_id) == [*before, "interaction.answered"]


def test_cancel__without_grant_is_forbidden(stack: Stack) -> None:
    run_id, asked = parked("t.ask_two")
    with pytest.raises(Forbidden):
        cancel(asked["window"].id, response_id=new_response_id(), principal=STRANGER)
    assert interaction(asked["window"].id).status == "pending"
    assert run_row(run_id).status == "waiting"


def test_cancel__is_one_transaction_a_failure_midway_changes_nothing(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the cancel's statement fails after its interactions, step and run were written (its last part,
    # the rows it returns, divides by zero)
    run_id, asked = parked("t.ask_two")
    before = event_types(run_id)
    broken = store_interactions._cancel().add_columns(literal_column("1 / 0"))
    monkeypatch.setattr(store_interactions, "_cancel", lambda: broken)

    with pytest.raises(DBAPIError, match="division by zero"):
        cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)

    # Then nothing of the cancel is visible: all or nothing
    assert {interaction(i.id).status for i in asked.values()} == {"pending"}
    assert step(asked["window"].step_id).status == "parked"
    assert run_row(run_id).status == "waiting"
    assert event_types(run_id) == before
