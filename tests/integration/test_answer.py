"""Answering: first response wins, exact retries, 409/410/422/403, permissions."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from sqlalchemy import select, text

from models import store
from models.base import utcnow
from models.tables import Grant, Principal
from parkway.db import transaction
from tasks.sdk import (
    Conflict,
    Forbidden,
    Gone,
    InvalidAnswer,
    NotFound,
    answer,
    response_digest,
)
from tests.integration.helpers import (
    answer_in,
    execute_ready,
    interaction,
    live_grant_ids,
    parked,
    ready,
    someone_waits_for_a_lock,
    while_held,
)
from tests.support import (
    ADMIN,
    HUMAN,
    STRANGER,
    TARGET,
    Stack,
    continuations,
    event_types,
    new_response_id,
    run_row,
    wait_for,
)


def _race(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run the callables in threads released together; each result is a value or the exception raised."""
    barrier = threading.Barrier(len(fns))

    def go(fn: Callable[[], Any]) -> Any:
        barrier.wait(timeout=30)
        try:
            return fn()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(fns)) as pool:
        return list(pool.map(go, fns))


# --------------------------------------------------------------------------- exact retry and conflicts


def test_answer__exact_retry_returns_the_identical_receipt_also_after_the_run_completed(stack: Stack) -> None:
    # Given a run parked on one question, answered once
    run_id, asked = parked("t.ask_one")
    rid = new_response_id()
    first = answer(asked["go"].id, "yes", response_id=rid, principal=HUMAN)
    assert first["status"] == "answered" and first["response_id"] == rid

    # Then a retry right away gets the same receipt
    assert answer(asked["go"].id, "yes", response_id=rid, principal=HUMAN) == first

    # When the run completes (its continuation committed)
    execute_ready(run_id)
    assert run_row(run_id).status == "completed"

    # Then a retry still gets the same receipt, and nothing was written by the retries
    before = event_types(run_id)
    assert answer(asked["go"].id, "yes", response_id=rid, principal=HUMAN) == first
    assert event_types(run_id) == before
    assert [c.kind for c in continuations(run_id)] == ["start", "resume"]


def test_answer__different_response_afterwards_gets_conflict_with_the_authoritative_state(
    stack: Stack,
) -> None:
    run_id, asked = parked("t.ask_one")
    first = answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)

    with pytest.raises(Conflict) as caught:
        answer(asked["go"].id, "no", response_id=new_response_id(), principal=HUMAN)

    state = caught.value.state
    assert state is not None
    assert state["id"] == asked["go"].id
    assert state["status"] == "answered"
    assert state["answered_by"] == HUMAN
    assert state["run_id"] == run_id
    row = interaction(asked["go"].id)
    assert row.value == "yes" and row.response_id == first["response_id"]


def test_answer__same_response_id_with_a_different_value_is_a_conflict(stack: Stack) -> None:
    _, asked = parked("t.ask_one")
    rid = new_response_id()
    answer(asked["go"].id, "yes", response_id=rid, principal=HUMAN)

    with pytest.raises(Conflict) as caught:
        answer(asked["go"].id, "no", response_id=rid, principal=HUMAN)

    assert caught.value.state is not None and caught.value.state["status"] == "answered"
    assert interaction(asked["go"].id).value == "yes"


def test_answer__twenty_concurrent_answers_give_one_receipt_and_nineteen_conflicts(stack: Stack) -> None:
    # Given one pending question
    run_id, asked = parked("t.ask_one")
    iid = asked["go"].id

    # When twenty people answer it at once, each with their own response
    responses = [(new_response_id(), f"value-{n}") for n in range(20)]
    results = _race(
        [
            (lambda rid=rid, value=value: answer(iid, value, response_id=rid, principal=HUMAN))
            for rid, value in responses
        ]
    )

    # Then exactly one wins and every other gets 409, with the winner's value stored
    receipts = [r for r in results if isinstance(r, dict)]
    conflicts = [r for r in results if isinstance(r, Conflict)]
    others = [r for r in results if not isinstance(r, dict | Conflict)]
    assert others == []
    assert len(receipts) == 1 and len(conflicts) == 19
    winner = dict(responses)[receipts[0]["response_id"]]
    assert interaction(iid).value == winner
    assert event_types(run_id).count("interaction.answered") == 1
    assert [c.kind for c in continuations(run_id)] == ["start", "resume"]


def test_answer__concurrent_answers_to_both_questions_of_a_step_make_exactly_one_continuation(
    stack: Stack,
) -> None:
    # Repeated: the race between "window" and "reason" must never skip or double the continuation
    for _ in range(10):
        run_id, asked = parked("t.ask_two")
        window, reason = asked["window"].id, asked["reason"].id
        results = _race(
            [
                partial(answer, window, "now", response_id=new_response_id(), principal=HUMAN),
                partial(answer, reason, "patch", response_id=new_response_id(), principal=HUMAN),
            ]
        )
        assert all(isinstance(r, dict) and r["status"] == "answered" for r in results), results
        resumes = [c for c in continuations(run_id) if c.kind == "resume"]
        assert len(resumes) == 1, f"run {run_id}: {len(resumes)} resume continuations"
        assert resumes[0].status == "ready"
        assert run_row(run_id).status == "running"
        assert event_types(run_id).count("continuation.ready") == 2  # start + resume


def _hold_an_answer(iid: str, value: Any, rid: str, answered: threading.Event, release: threading.Event) -> Any:
    """Answer in a transaction that stays open (the step's lock held) until ``release`` is set."""
    with transaction() as session:
        who = store.principal_ref_by_name(session, HUMAN)
        assert who is not None
        receipt = store.answer(session, iid, value=value, response_id=rid, response_digest=response_digest(value),
                               principal=who)  # fmt: skip
        answered.set()
        assert release.wait(30)
    return receipt.as_dict()


@pytest.mark.parametrize("same_response", [False, True], ids=["another-response", "exact-retry"])
def test_answer__one_that_waited_for_the_step_lock_sees_what_committed_meanwhile(
    stack: Stack, same_response: bool
) -> None:
    # Given a pending question, answered in a transaction still open (it holds the step's lock)
    run_id, asked = parked("t.ask_one")
    iid, first_rid = asked["go"].id, new_response_id()
    answered, release = threading.Event(), threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_hold_an_answer, iid, "yes", first_rid, answered, release)
        assert answered.wait(30)

        # When a second answer arrives and waits for that lock (on PostgreSQL its read was taken before the
        # wait, so it still shows the question pending)
        rid, value = (first_rid, "yes") if same_response else (new_response_id(), "no")
        second = pool.submit(answer, iid, value, response_id=rid, principal=HUMAN)
        wait_for(lambda: someone_waits_for_a_lock(), timeout=30, what="the second answer waits for the lock")
        release.set()
        receipt = first.result(timeout=30)

        # Then the second tells what committed: the same receipt for an exact retry, else a conflict
        if same_response:
            assert second.result(timeout=30) == receipt
        else:
            with pytest.raises(Conflict) as caught:
                second.result(timeout=30)
            assert caught.value.state is not None and caught.value.state["status"] == "answered"

    # And only the first was written: one answer, one continuation
    assert interaction(iid).value == "yes" and interaction(iid).response_id == first_rid
    assert event_types(run_id).count("interaction.answered") == 1
    assert [c.kind for c in continuations(run_id)] == ["start", "resume"]


def test_answer__one_that_waited_for_the_step_lock_while_the_run_ended_is_gone(stack: Stack) -> None:
    # Given a pending question whose step's lock is held by a transaction that ends the run
    run_id, asked = parked("t.ask_one")
    iid = asked["go"].id
    locked, release = threading.Event(), threading.Event()

    def end_the_run_holding_the_lock() -> None:
        with transaction() as session:
            session.execute(text("SELECT id FROM steps WHERE id = :sid FOR UPDATE"), {"sid": asked["go"].step_id})
            session.execute(text("UPDATE runs SET status = 'canceled' WHERE id = :rid"), {"rid": run_id})
            locked.set()
            assert release.wait(30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        holder = pool.submit(end_the_run_holding_the_lock)
        assert locked.wait(30)

        # When an answer arrives meanwhile and waits for the lock
        second = pool.submit(answer, iid, "yes", response_id=new_response_id(), principal=HUMAN)
        wait_for(lambda: someone_waits_for_a_lock(), timeout=30, what="the answer waits for the lock")
        release.set()
        holder.result(timeout=30)

        # Then it is refused as gone, and nothing of it was written
        with pytest.raises(Gone):
            second.result(timeout=30)
    row = interaction(iid)
    assert row.status == "pending" and row.response_id is None
    assert "interaction.answered" not in event_types(run_id)
    assert [c.kind for c in continuations(run_id)] == ["start"]


def test_answer__one_that_waited_for_the_step_lock_sees_its_sibling_answered_and_makes_the_step_due(
    stack: Stack,
) -> None:
    """Why an answer is two statements: its CAS must be taken after the step's lock, never with it. A
    statement that waited for the lock still reads from the snapshot it began with; there the sibling would
    look pending, as this answer did to the sibling's, and neither would make the step due."""
    # Given a step parked on two questions
    run_id, asked = parked("t.ask_two")

    # When one is answered while the other is being answered in a transaction that holds the step's lock
    receipt = while_held(
        lambda session: answer_in(session, asked["window"].id, "now"),
        partial(answer, asked["reason"].id, "patch", response_id=new_response_id(), principal=HUMAN),
    )

    # Then the last answer made the step due: one resume continuation, ready, its event after both answers
    assert receipt["status"] == "answered"
    resumes = [c for c in continuations(run_id) if c.kind == "resume"]
    assert [c.status for c in resumes] == ["ready"], f"{len(resumes)} resume continuations"
    assert run_row(run_id).status == "running"
    types = event_types(run_id)
    assert types[-3:] == ["interaction.answered", "interaction.answered", "continuation.ready"], types


# --------------------------------------------------------------------------- invalid, unknown, forbidden


def test_answer__schema_failing_value_is_422_stores_nothing_and_a_valid_answer_still_wins(
    stack: Stack,
) -> None:
    # Given a question whose schema is an enum of "now" and "tonight"
    run_id, asked = parked("t.ask_two")
    iid = asked["window"].id
    before = event_types(run_id)

    # When a value outside the enum is sent
    with pytest.raises(InvalidAnswer) as caught:
        answer(iid, "yesterday", response_id=new_response_id(), principal=HUMAN)

    # Then the error lists the violations and nothing is stored
    assert caught.value.errors and any("yesterday" in e for e in caught.value.errors)
    assert "schema" in caught.value.detail
    row = interaction(iid)
    assert row.status == "pending"
    assert row.value is None and row.response_id is None and row.answered_by_id is None
    assert event_types(run_id) == before

    # And a valid answer afterwards is accepted
    receipt = answer(iid, "tonight", response_id=new_response_id(), principal=HUMAN)
    assert receipt["status"] == "answered"
    assert interaction(iid).value == "tonight"


def test_answer__a_value_valid_for_a_schema_answered_before_is_still_checked_against_this_waits(
    stack: Stack,
) -> None:
    # Given a wait of {"type": "string"} answered with "yesterday" (this process has validated that schema,
    # and vouches for the values it accepts when it answers again: models.answers.vouched)
    _, one = parked("t.ask_one")
    answer(one["go"].id, "yesterday", response_id=new_response_id(), principal=HUMAN)
    run_id, asked = parked("t.ask_two")
    iid = asked["window"].id
    before = event_types(run_id)

    # When the same value goes to a wait whose schema it fails (an enum of "now" and "tonight")
    with pytest.raises(InvalidAnswer):
        answer(iid, "yesterday", response_id=new_response_id(), principal=HUMAN)

    # Then nothing is stored, and a value of its enum is accepted
    assert interaction(iid).status == "pending" and event_types(run_id) == before
    assert answer(iid, "now", response_id=new_response_id(), principal=HUMAN)["status"] == "answered"


def test_answer__wrong_type_is_422(stack: Stack) -> None:
    _, asked = parked("t.ask_two")
    with pytest.raises(InvalidAnswer) as caught:
        answer(asked["reason"].id, 42, response_id=new_response_id(), principal=HUMAN)
    assert caught.value.errors
    assert interaction(asked["reason"].id).status == "pending"


def test_answer__empty_response_id_is_refused(stack: Stack) -> None:
    _, asked = parked("t.ask_one")
    with pytest.raises(InvalidAnswer):
        answer(asked["go"].id, "yes", response_id="", principal=HUMAN)
    assert interaction(asked["go"].id).status == "pending"


def test_answer__unknown_interaction_is_not_found(stack: Stack) -> None:
    with pytest.raises(NotFound):
        answer("0" * 32, "yes", response_id=new_response_id(), principal=HUMAN)


def test_answer__principal_without_grant_is_forbidden_and_nothing_is_stored(stack: Stack) -> None:
    run_id, asked = parked("t.ask_one")
    before = event_types(run_id)

    with pytest.raises(Forbidden):
        answer(asked["go"].id, "yes", response_id=new_response_id(), principal=STRANGER)

    row = interaction(asked["go"].id)
    assert row.status == "pending" and row.value is None and row.answered_by_id is None
    assert event_types(run_id) == before


def test_answer__unknown_principal_is_forbidden(stack: Stack) -> None:
    _, asked = parked("t.ask_one")
    with pytest.raises(Forbidden, match="principal nobody-at-all does not exist"):
        answer(asked["go"].id, "yes", response_id=new_response_id(), principal="nobody-at-all")
    assert interaction(asked["go"].id).status == "pending"


def test_answer__unknown_principal_is_told_before_an_unknown_interaction(stack: Stack) -> None:
    # (on PostgreSQL both are looked up in one statement; which one is missing is still told in this order)
    with pytest.raises(Forbidden, match="principal nobody-at-all does not exist"):
        answer("0" * 32, "yes", response_id=new_response_id(), principal="nobody-at-all")


@pytest.fixture
def ana_revoked(stack: Stack) -> Iterator[None]:
    """Ana's grants on team:ops revoked for the test, given back afterwards (the stack is module-wide)."""
    grants = live_grant_ids(HUMAN)
    assert grants, "ana should hold a grant on team:ops"
    with transaction() as session:
        for grant_id in grants:
            assert store.revoke_grant(session, grant_id) is not None
    try:
        yield
    finally:
        with transaction() as session:
            ana = store.principal_by_name(session, HUMAN)
            assert ana is not None
            store.create_grant(session, principal_id=ana.id, target=TARGET)


def test_answer__revoked_grant_is_forbidden_at_once(stack: Stack, ana_revoked: None) -> None:
    # Given ana's grant was revoked after the question was asked
    _, asked = parked("t.ask_one")
    assert not live_grant_ids(HUMAN)

    with pytest.raises(Forbidden):
        answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)

    assert interaction(asked["go"].id).status == "pending"


def test_answer__revoking_one_grant_twice_is_a_no_op(stack: Stack, ana_revoked: None) -> None:
    revoked = [g for g in _all_grants(HUMAN) if g[1] is not None]
    assert revoked
    with transaction() as session:
        assert store.revoke_grant(session, revoked[0][0]) is None


def _all_grants(name: str) -> list[tuple[str, Any]]:
    with transaction() as session:
        rows = session.execute(
            select(Grant.id, Grant.revoked_at)
            .join(Principal, Principal.id == Grant.principal_id)
            .where(Principal.name == name)
        )
        return [(i, r) for i, r in rows]


def test_answer__admin_answers_only_where_granted(stack: Stack) -> None:
    # Admins read everything, but answering needs a live grant on the target as for anyone
    _, asked = parked("t.ask_one")
    with pytest.raises(Forbidden):
        answer(asked["go"].id, "yes", response_id=new_response_id(), principal=ADMIN)
    assert interaction(asked["go"].id).status == "pending"
    with transaction() as session:
        admin = store.principal_by_name(session, ADMIN)
        assert admin is not None
        grant = store.create_grant(session, principal_id=admin.id, target=TARGET)
    try:
        receipt = answer(asked["go"].id, "yes", response_id=new_response_id(), principal=ADMIN)
        assert receipt["status"] == "answered"
        with pytest.raises(Conflict) as caught:
            answer(asked["go"].id, "no", response_id=new_response_id(), principal=HUMAN)
        assert caught.value.state is not None and caught.value.state["answered_by"] == ADMIN
    finally:
        with transaction() as session:
            store.revoke_grant(session, grant.id)


# --------------------------------------------------------------------------- permissions


def test_permission__approved_true_is_answered_and_approved(stack: Stack) -> None:
    run_id, asked = parked("t.permission", {"cmd": "deploy api"})
    receipt = answer(asked["shell"].id, {"approved": True}, response_id=new_response_id(), principal=HUMAN)
    assert receipt["status"] == "answered"
    assert interaction(asked["shell"].id).status == "answered"
    assert "interaction.answered" in event_types(run_id)

    execute_ready(run_id)
    assert run_row(run_id).result == {"approved": True, "status": "answered"}


def test_permission__approved_false_is_rejected_and_not_approved(stack: Stack) -> None:
    run_id, asked = parked("t.permission", {"cmd": "drop table"})
    receipt = answer(asked["shell"].id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)
    assert receipt["status"] == "rejected"
    assert interaction(asked["shell"].id).status == "rejected"
    assert "interaction.rejected" in event_types(run_id)

    execute_ready(run_id)
    assert run_row(run_id).result == {"approved": False, "status": "rejected"}


def test_permission__rejected_then_exact_retry_and_other_response(stack: Stack) -> None:
    _, asked = parked("t.permission", {"cmd": "reboot"})
    rid = new_response_id()
    first = answer(asked["shell"].id, {"approved": False}, response_id=rid, principal=HUMAN)
    assert answer(asked["shell"].id, {"approved": False}, response_id=rid, principal=HUMAN) == first
    with pytest.raises(Conflict) as caught:
        answer(asked["shell"].id, {"approved": True}, response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None and caught.value.state["status"] == "rejected"


@pytest.mark.parametrize("value", ["yes", True, {"approved": "yes"}, {"approved": 1}, {}, {"approved": True, "x": 1}])
def test_permission__value_that_is_not_an_approved_bool_is_422(stack: Stack, value: Any) -> None:
    run_id, asked = parked("t.permission", {"cmd": "ls"})
    before = event_types(run_id)
    with pytest.raises(InvalidAnswer):
        answer(asked["shell"].id, value, response_id=new_response_id(), principal=HUMAN)
    assert interaction(asked["shell"].id).status == "pending"
    assert event_types(run_id) == before


def test_permission__interaction_id_is_derived_from_step_key_kind_and_resources(stack: Stack) -> None:
    run_id, asked = parked("t.permission", {"cmd": "deploy web"})
    shell = asked["shell"]
    assert shell.resources == ["deploy web"]
    assert shell.id == store.interaction_id(shell.step_id, "shell", "permission", ["deploy web"])
    assert shell.id != store.interaction_id(shell.step_id, "shell", "permission", ["deploy api"])
    assert ready(run_id) == []


# --------------------------------------------------------------------------- expiry deadline


def test_answer__after_the_deadline_is_gone_even_before_a_sweep_ran(stack: Stack) -> None:
    # Given a question that expires in one second
    run_id, asked = parked("t.ask_two", {"expires_in": 1})
    window = asked["window"]
    assert window.expires_at is not None

    # When its deadline passes (no sweep has run yet)
    wait_for(lambda: utcnow() > window.expires_at, timeout=5, what="the deadline to pass")

    # Then a late answer is refused as expired: the wait ended at the deadline, not when a sweep noticed
    with pytest.raises(Gone) as caught:
        answer(window.id, "now", response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None and caught.value.state["status"] == "expired"
    assert Counter(event_types(run_id))["interaction.answered"] == 0
