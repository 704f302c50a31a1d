"""Who may answer a plain wait (no quorum; its team options, if any, are read at the answer): every principal
kind, with and without a live grant, and what changed after the park — a grant made or revoked, a
delegation, the assignees alone. The answer's function reads the team rules only when the wait's rows name
someone (migration 0031), so each case here is one that rule must still decide at the answer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

import tests.team_workflows  # noqa: F401  (registers teams.approve in this process)
from models import principals, store
from parkway.db import transaction
from tasks.sdk import Forbidden, answer
from tests.integration.helpers import add_principal, interaction, live_grant_ids, parked
from tests.support import HUMAN, TARGET, Stack, event_types, new_response_id

YES = {"approved": True}


def _someone(kind: str, *, granted: bool) -> str:
    """A new principal of ``kind``, granted on the wait's target or not."""
    name = f"{kind}-{uuid.uuid4().hex[:8]}"
    add_principal(name, kind, grant=TARGET if granted else None)
    return name


def _ref(name: str) -> store.PrincipalRef:
    with transaction() as session:
        found = store.principal_ref_by_name(session, name)
    assert found is not None, name
    return found


def _refused(iid: str, name: str, run_id: str) -> None:
    """``name``'s answer is ``Forbidden`` and writes nothing."""
    before = event_types(run_id)
    with pytest.raises(Forbidden):
        answer(iid, YES, response_id=new_response_id(), principal=name)
    row = interaction(iid)
    assert (row.status, row.value, row.answered_by_id) == ("pending", None, None)
    assert event_types(run_id) == before


def _answers(iid: str, name: str) -> None:
    assert answer(iid, YES, response_id=new_response_id(), principal=name)["status"] == "answered"
    assert interaction(iid).answered_by_id is not None


@pytest.fixture
def plain(stack: Stack) -> Iterator[tuple[str, str]]:
    """A run parked on one permission with no team options: (run id, interaction id)."""
    run_id, asked = parked("teams.approve", {"target": TARGET})
    yield run_id, asked["deploy"].id


@pytest.mark.parametrize(
    ("kind", "granted", "may"),
    [
        ("human", True, True),
        ("human", False, False),
        ("admin", True, True),
        ("admin", False, False),
        ("agent", True, False),
        ("agent", False, False),
        ("worker", True, False),
        ("worker", False, False),
    ],
)
def test_answer__a_plain_wait_takes_humans_and_admins_granted_on_its_target_alone(
    plain: tuple[str, str], kind: str, granted: bool, may: bool
) -> None:
    run_id, iid = plain
    name = _someone(kind, granted=granted)
    if may:
        _answers(iid, name)
    else:
        _refused(iid, name, run_id)


def test_answer__a_disabled_principal_with_a_grant_is_refused(plain: tuple[str, str]) -> None:
    run_id, iid = plain
    name = _someone("human", granted=True)
    with transaction() as session:
        assert principals.disable(session, _ref(name).id) is not None
    _refused(iid, name, run_id)


def test_answer__a_grant_made_after_the_park_counts_and_one_revoked_after_it_does_not(
    plain: tuple[str, str],
) -> None:
    # Given a wait parked before bo held any grant and before cy's was revoked
    run_id, iid = plain
    bo, cy = _someone("human", granted=False), _someone("human", granted=True)
    with transaction() as session:
        for grant in live_grant_ids(cy):
            assert store.revoke_grant(session, grant) is not None
        store.create_grant(session, principal_id=_ref(bo).id, target=TARGET)

    # Then the grants at the answer decide: cy is refused, bo answers
    _refused(iid, cy, run_id)
    _answers(iid, bo)


def test_answer__a_delegation_made_after_the_park_moves_the_place(plain: tuple[str, str]) -> None:
    # Given ana (granted) delegated the plain wait to bo (no grant) after it parked
    run_id, iid = plain
    bo = _someone("human", granted=False)
    with transaction() as session:
        store.delegate(session, iid, principal=_ref(HUMAN), to=bo, note=None)

    # Then ana holds the place no more, and bo answers in it
    _refused(iid, HUMAN, run_id)
    _answers(iid, bo)


def test_answer__under_assignees_only_a_grant_on_the_target_is_no_place(stack: Stack) -> None:
    # Given a wait that its assignee alone may answer, and ana granted on its target
    bo = _someone("human", granted=False)
    run_id, asked = parked("teams.approve", {"target": TARGET, "assignees": [bo], "assignees_only": True})
    iid = asked["deploy"].id

    # Then ana is refused, and the assignee answers
    _refused(iid, HUMAN, run_id)
    _answers(iid, bo)


def test_answer__assignees_only_with_no_assignee_rows_is_no_place_for_a_grant(plain: tuple[str, str]) -> None:
    # Given a wait whose options say its assignees alone may answer and no row names one (no park makes this:
    # it is the rule's own case, written directly), ana granted on its target
    run_id, iid = plain
    with transaction() as session:
        session.execute(text("UPDATE interactions SET team = '{\"assignees_only\": true}' WHERE id = :i"), {"i": iid})

    # Then ana holds no place, as parkway_place_of says
    with transaction() as session:
        assert session.scalar(text("SELECT parkway_place_of(:i, :p, false)"), {"i": iid, "p": _ref(HUMAN).id}) is None
    _refused(iid, HUMAN, run_id)
