"""Approvals as teams make them (docs/teams.md): quorum, named approvers, delegation — over HTTP, the
continuations driven inline (``drive``) as the other API tests do."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import examples.release  # noqa: F401  (registers the README's release.request in this process)
import tests.team_workflows  # noqa: F401  (registers the team workflows in this process)
from beat.sweep import run_sweep
from models import history, store
from models.store import PrincipalRef
from models.tables import Interaction, Run
from parkway.db import open_transaction, single_statement, transaction
from parkway.errors import Forbidden
from tasks import sdk
from tests.api.conftest import ADMIN, AGENT, Actors, drive
from tests.support import (
    TARGET,
    WAITING_ON_A_LOCK,
    Stack,
    continuations,
    event_types,
    interactions,
    pass_time,
    wait_for,
    wait_parked,
    wait_status,
)

IDS: dict[str, str] = {}  # principal ids by name, of those people() made


def people(client: TestClient, actors: Actors, count: int, *, granted: bool = True) -> list[str]:
    """``count`` new humans (their tokens in ``actors``), granted on the test target unless not."""
    admin = actors.auth(ADMIN)
    names = [f"tm-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    for name in names:
        made = client.post("/v1/principals", json={"kind": "human", "name": name}, headers=admin)
        assert made.status_code == 201, made.text
        actors.tokens[name] = made.json()["token"]
        IDS[name] = made.json()["id"]
        if granted:
            grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin)
            assert grant.status_code == 201, grant.text
            actors.grants[name] = grant.json()["id"]
    return names


def listed(client: TestClient, actors: Actors, name: str, query: str = "?status=pending") -> list[str]:
    """The ids ``GET /v1/interactions`` lists for ``name``, every page followed."""
    ids: list[str] = []
    path: str | None = f"/v1/interactions{query}&limit=7"
    while path is not None:
        page = client.get(path, headers=actors.auth(name))
        assert page.status_code == 200, page.text
        ids += [i["id"] for i in page.json()["items"]]
        cursor = page.json()["next"]
        path = None if cursor is None else f"/v1/interactions{query}&limit=7&cursor={cursor}"
    return ids


def for_me(name: str, *, mine: bool = True, limit: int = 3) -> list[tuple[str, bool]]:
    """The Decisions page's pending list for ``name`` (its ``mine`` view, or all), every page followed:
    (id, names_me) each."""
    seen: list[tuple[str, bool]] = []
    cursor = None
    while True:
        with transaction() as session:
            caller = store.principal_by_name(session, name)
            assert caller is not None
            page = history.pending(session, caller, mine=mine, cursor=cursor, limit=limit)
            seen += [(v.interaction.id, v.names_me) for v in page.items]
        if page.next is None:
            return seen
        cursor = page.next


def start(client: TestClient, actors: Actors, workflow: str, **payload: Any) -> tuple[str, str]:
    """A run of ``workflow`` parked on its one wait: (run id, interaction id)."""
    made = client.post("/v1/runs", json={"workflow": workflow, "payload": {"target": TARGET, **payload},
                                         "target": TARGET}, headers=actors.auth(AGENT))  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    drive(run_id)
    (asked,) = interactions(run_id).values()
    return run_id, asked.id


def answer(client: TestClient, actors: Actors, iid: str, by: str, value: Any, response_id: str | None = None) -> Any:
    body = {"response_id": response_id or f"r-{by}", "value": value}
    return client.post(f"/v1/interactions/{iid}/answer", json=body, headers=actors.auth(by))


def delegate(client: TestClient, actors: Actors, iid: str, by: str, to: str, note: str | None = None) -> Any:
    body = {"to": to, **({"note": note} if note else {})}
    return client.post(f"/v1/interactions/{iid}/delegate", json=body, headers=actors.auth(by))


def read(client: TestClient, actors: Actors, iid: str) -> Any:
    got = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN))
    assert got.status_code == 200, got.text
    return got.json()


def result(run_id: str) -> Any:
    drive(run_id)
    with transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.status, run.result


YES, NO = {"approved": True}, {"approved": False}


def test_quorum__two_of_three_resumes_once_after_the_second_distinct_approval(
    client: TestClient, actors: Actors
) -> None:
    ana, bo, cy = people(client, actors, 3)
    run_id, iid = start(client, actors, "teams.approve", quorum=2)

    # The first approval is recorded, the wait still pending: nothing resumes
    first = answer(client, actors, iid, ana, YES)
    assert (first.status_code, first.json()["status"]) == (200, "pending"), first.text
    assert result(run_id) == ("waiting", None)
    # The second distinct approval decides: the step resumes once, seeing both responses
    second = answer(client, actors, iid, bo, YES)
    assert (second.status_code, second.json()["status"]) == (200, "answered"), second.text
    status, seen = result(run_id)
    assert status == "completed" and seen["approved"] is True and seen["answered_by"] == bo
    assert [r["principal"] for r in seen["responses"]] == [ana, bo]
    assert event_types(run_id).count("continuation.ready") == 2  # the start's and the one resume
    assert event_types(run_id).count("interaction.responded") == 1

    # A third response after the decision: 409 naming the decision and who made it
    late = answer(client, actors, iid, cy, NO)
    assert late.status_code == 409, late.text
    assert f"already answered by {bo}" in late.json()["detail"]
    assert late.json()["state"]["status"] == "answered" and late.json()["state"]["answered_by"] == bo


def test_quorum__the_same_principal_again_gets_its_receipt_or_409(client: TestClient, actors: Actors) -> None:
    ana, bo = people(client, actors, 2)
    _, iid = start(client, actors, "teams.approve", quorum=2)
    first = answer(client, actors, iid, ana, YES, "one")
    assert first.status_code == 200, first.text

    # An exact retry: the same receipt, exactly
    again = answer(client, actors, iid, ana, YES, "one")
    assert (again.status_code, again.json()) == (200, first.json())
    # The same principal with another response (or another value): 409, and it does not count twice
    for response_id, value in (("two", YES), ("one", NO)):
        other = answer(client, actors, iid, ana, value, response_id)
        assert other.status_code == 409 and f"{ana} already responded" in other.json()["detail"], other.text
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()["status"] == "pending"
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"


def test_quorum__a_rejection_rejects(client: TestClient, actors: Actors) -> None:
    ana, bo = people(client, actors, 2)
    run_id, iid = start(client, actors, "teams.approve", quorum=2)
    assert answer(client, actors, iid, ana, YES).json()["status"] == "pending"
    rejected = answer(client, actors, iid, bo, NO)
    assert (rejected.status_code, rejected.json()["status"]) == (200, "rejected"), rejected.text
    status, seen = result(run_id)
    assert (status, seen["status"], seen["approved"]) == ("completed", "rejected", False)


def test_quorum__unreachable_policy_rejects_only_when_the_quorum_cannot_come(
    client: TestClient, actors: Actors
) -> None:
    # Given three assignees alone may answer a 2-of-3 approval, rejected only once 2 approvals cannot come
    ana, bo, cy = people(client, actors, 3, granted=False)
    _, iid = start(client, actors, "teams.approve", quorum=2, assignees=[ana, bo, cy], assignees_only=True,
                   reject="unreachable")  # fmt: skip
    assert answer(client, actors, iid, ana, NO).json()["status"] == "pending"  # bo and cy may still approve
    assert answer(client, actors, iid, bo, NO).json()["status"] == "rejected"  # now only cy: not enough


def test_quorum__a_question_collects_every_response_and_never_shows_a_sensitive_one(
    client: TestClient, actors: Actors
) -> None:
    ana, bo, cy = people(client, actors, 3)
    run_id, iid = start(client, actors, "teams.ask", quorum=3)
    for k, name in enumerate((ana, bo, cy)):
        got = answer(client, actors, iid, name, {"note": f"n{k}", "pin": f"{k}" * (k + 4)})
        assert got.status_code == 200, got.text

    # Read back: every response listed, its sensitive field as "***", never the value
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert [(r["principal"], r["value"]) for r in read["responses"]] == [
        (name, {"note": f"n{k}", "pin": "***"}) for k, name in enumerate((ana, bo, cy))
    ]
    assert read["quorum"] == 3
    # The continuation saw each response whole (the lengths of the pins it was given)
    status, seen = result(run_id)
    assert status == "completed"
    assert [(r["principal"], r["note"], r["pin_len"]) for r in seen["responses"]] == [
        (ana, "n0", 4), (bo, "n1", 5), (cy, "n2", 6)
    ]  # fmt: skip
    # And once it committed, no sealed value is left
    assert interactions(run_id)["pin"].secret is None
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert all(r["value"]["pin"] == "***" for r in read["responses"])


def test_assignees__alone_an_assignee_without_a_grant_may_answer_and_a_granted_non_assignee_may_not(
    client: TestClient, actors: Actors
) -> None:
    (ana,) = people(client, actors, 1, granted=False)
    (bo,) = people(client, actors, 1)  # granted on the target, but not named
    run_id, iid = start(client, actors, "teams.approve", assignees=[ana], assignees_only=True)
    refused = answer(client, actors, iid, bo, YES)
    assert refused.status_code == 403, refused.text
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(ana)).status_code == 200  # named: may read
    assert answer(client, actors, iid, ana, YES).json()["status"] == "answered"
    assert result(run_id)[1]["answered_by"] == ana


def test_assignees__on_top_of_the_grants_both_may_answer(client: TestClient, actors: Actors) -> None:
    (ana,) = people(client, actors, 1, granted=False)
    (bo,) = people(client, actors, 1)
    _, iid = start(client, actors, "teams.approve", quorum=2, assignees=[ana])
    assert answer(client, actors, iid, ana, YES).json()["status"] == "pending"
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert (read["assignees"], [r["principal"] for r in read["responses"]]) == ([ana], [ana, bo])


def test_delegate__the_delegate_may_answer_and_it_is_recorded(client: TestClient, actors: Actors) -> None:
    (ana,) = people(client, actors, 1)
    (bo,) = people(client, actors, 1, granted=False)
    run_id, iid = start(client, actors, "teams.approve")
    assert answer(client, actors, iid, bo, YES).status_code == 403  # not yet

    assert delegate(client, actors, iid, ana, ana).status_code == 422  # to oneself
    assert delegate(client, actors, iid, ana, AGENT).status_code == 422  # an agent could never answer
    assert delegate(client, actors, iid, bo, ana).status_code == 403  # one who holds no place has none to hand on
    made = delegate(client, actors, iid, ana, bo, "on leave")
    assert made.status_code == 200 and (made.json()["to"], made.json()["by"]) == (bo, ana), made.text
    assert "interaction.delegated" in event_types(run_id)
    delegations = read(client, actors, iid)["delegations"]
    assert [(d["to"], d["by"], d["for"], d["note"]) for d in delegations] == [(bo, ana, ana, "on leave")]
    again = delegate(client, actors, iid, ana, bo, "on leave")  # a retry while it stands: the same delegation
    assert (again.status_code, again.json()) == (200, made.json()), again.text
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"
    assert delegate(client, actors, iid, ana, bo).status_code == 409  # the wait is decided
    # The one answer of a first-wins wait says in whose place it came
    assert [(r["principal"], r["for"]) for r in read(client, actors, iid)["responses"]] == [(bo, ana)]


def _sweep_concurrently(times: int) -> None:
    """``times`` sweep passes at the same moment, each on its own thread and connection."""
    with ThreadPoolExecutor(max_workers=times) as pool:
        for done in [pool.submit(run_sweep) for _ in range(times)]:
            done.result()


def test_reminders_and_escalation__each_written_once_under_concurrent_sweeps(
    client: TestClient, actors: Actors
) -> None:
    # Given a wait that only ana may answer, reminding at 60s and 120s, escalating to bo at 300s
    (ana, bo) = people(client, actors, 2, granted=False)
    run_id, iid = start(client, actors, "teams.approve", assignees=[ana], assignees_only=True,
                        remind_after=[60, 120], escalate=[[300, [bo]]], expires_in=3600)  # fmt: skip
    assert answer(client, actors, iid, bo, YES).status_code == 403  # not yet escalated

    # When 61s pass and four sweeps run at once: one reminder
    pass_time(61)
    _sweep_concurrently(4)
    assert event_types(run_id).count("interaction.reminded") == 1
    # When 300s more pass and four sweeps run at once: the second reminder and the escalation, once each
    pass_time(300)
    _sweep_concurrently(4)
    _sweep_concurrently(2)
    types = event_types(run_id)
    assert (types.count("interaction.reminded"), types.count("interaction.escalated")) == (2, 1)
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert (read["level"], read["reminders"]) == (1, 2)

    # Then bo, named by the level reached, may answer, and the decision records that level
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert (read["answered_by"], read["answered_level"]) == (bo, 1)
    assert result(run_id)[1]["responses"][0]["level"] == 1


def test_listing__what_names_a_person_and_what_escalated_to_their_team_lists_without_a_grant_on_the_target(
    client: TestClient, actors: Actors
) -> None:
    # Given a wait on team:ops naming ana (no grant on it), escalating to a team cy is granted on at 300s
    # (the agent too: it addresses only targets it is granted on), then to bo by name at 600s
    ana, bo, cy = people(client, actors, 3, granted=False)
    leads = f"team:leads-{uuid.uuid4().hex[:6]}"
    for who in (cy, AGENT):
        grant = client.post("/v1/grants", json={"principal": who, "target": leads}, headers=actors.auth(ADMIN))
        assert grant.status_code == 201, grant.text
    _, iid = start(client, actors, "teams.approve", assignees=[ana], escalate=[[300, leads], [600, [bo]]],
                   expires_in=3600)  # fmt: skip

    # The assignee lists it (any status too); the levels not reached yet neither list nor read it
    assert listed(client, actors, ana) == [iid]
    assert listed(client, actors, ana, "?target=team:ops") == [iid]
    assert iid in listed(client, actors, ana, "?run_id=" + interactions_run(iid))
    assert (listed(client, actors, cy), listed(client, actors, bo)) == ([], [])
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(cy)).status_code == 403
    assert for_me(ana) == [(iid, True)] and for_me(cy) == []

    # When the first level is reached: cy's team lists it (a grant gives it, not a name); bo still not
    pass_time(301)
    run_sweep()
    assert listed(client, actors, cy) == [iid] and listed(client, actors, bo) == []
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(cy)).status_code == 200
    assert for_me(cy) == [(iid, False)]
    # When the second is reached: bo, named by it, lists it as his
    pass_time(300)
    run_sweep()
    assert listed(client, actors, bo) == [iid] and for_me(bo) == [(iid, True)]

    # And once cy answers it, it leaves the pending lists, and stays readable to whoever it named
    assert answer(client, actors, iid, cy, YES).json()["status"] == "answered"
    assert (listed(client, actors, ana), for_me(ana)) == ([], [])
    assert listed(client, actors, ana, "?status=answered") == [iid]


def interactions_run(iid: str) -> str:
    with transaction() as session:
        run_id = session.scalar(select(Interaction.run_id).where(Interaction.id == iid))
        assert run_id is not None
        return run_id


def test_decisions__for_me_lists_what_names_the_person_before_what_only_their_grants_give(
    client: TestClient, actors: Actors
) -> None:
    # Given two waits on ana's team: the older one for the team, the newer one naming her
    (ana,) = people(client, actors, 1)
    _, older = start(client, actors, "teams.approve")
    _, named = start(client, actors, "teams.approve", assignees=[ana])

    # Then "mine" shows the one naming her first (marked so), then the team's, each once, page after page
    mine = for_me(ana)
    assert mine[0] == (named, True)
    assert (older, False) in mine and [i for i, _ in mine].count(named) == 1
    assert all(not names_me for _, names_me in mine[1:])
    # While "all" and the API's list keep the oldest first
    every = [i for i, _ in for_me(ana, mine=False)]
    assert every.index(older) < every.index(named) and every.count(named) == 1
    api = listed(client, actors, ana)
    assert api.index(older) < api.index(named) and api.count(named) == 1


def test_delegate__revoking_the_delegates_grant_leaves_the_delegation_the_delegators_ends_its_access(
    client: TestClient, actors: Actors
) -> None:
    # Given ana delegated a wait on her team to bo, who is on the team too
    ana, bo, cy = people(client, actors, 3)
    run_id, iid = start(client, actors, "teams.approve")
    made = client.post(f"/v1/interactions/{iid}/delegate", json={"to": bo}, headers=actors.auth(ana))
    assert made.status_code == 200, made.text

    # When the admin revokes the grants on the team of all three
    for name in (ana, bo, cy):
        assert client.delete(f"/v1/grants/{actors.grants[name]}", headers=actors.auth(ADMIN)).status_code == 204

    # Then the delegator and the colleague may no longer answer, nor list it
    assert answer(client, actors, iid, ana, YES).status_code == 403
    assert answer(client, actors, iid, cy, YES).status_code == 403
    assert iid not in listed(client, actors, ana) and iid not in listed(client, actors, cy)
    # And the delegate still may: the delegation names him, whatever his grants
    assert listed(client, actors, bo) == [iid]
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"
    assert result(run_id)[1]["answered_by"] == bo


def test_delegate__a_disabled_delegate_takes_the_place_with_it_and_an_admin_holds_none_to_reassign(
    client: TestClient, actors: Actors
) -> None:
    # Given ana delegated a wait on her team to bo (no grant), and bo was disabled since; dee is on the team too
    ana, dee = people(client, actors, 2)
    bo, cy = people(client, actors, 2, granted=False)
    run_id, iid = start(client, actors, "teams.approve")
    made = delegate(client, actors, iid, ana, bo)
    assert made.status_code == 200, made.text
    assert client.delete(f"/v1/principals/{IDS[bo]}", headers=actors.auth(ADMIN)).status_code == 204

    # Then bo may not answer: his token is refused, and by name (the SDK) he is no live principal
    assert answer(client, actors, iid, bo, YES).status_code == 401
    with pytest.raises(Forbidden):
        sdk.answer(iid, YES, response_id="r-bo", principal=bo)
    # Nor may ana, nor move the place again: it is hers no more
    assert answer(client, actors, iid, ana, YES).status_code == 403
    assert delegate(client, actors, iid, ana, cy).status_code == 403
    # An admin not granted on the team holds no place: a hand-over by it would add one
    assert delegate(client, actors, iid, ADMIN, cy).status_code == 403
    # One who holds a place may not hand it to the disabled bo
    assert delegate(client, actors, iid, dee, bo).status_code == 422
    # And the team's other places still decide
    assert answer(client, actors, iid, dee, YES).json()["status"] == "answered"
    assert [(d["to"], d["by"]) for d in read(client, actors, iid)["delegations"]] == [(bo, ana)]
    assert result(run_id)[1]["answered_by"] == dee


def _start_served(client: TestClient, actors: Actors, **payload: Any) -> tuple[str, str]:
    """A run of ``teams.approve`` that a real worker parked on its one wait: (run id, interaction id)."""
    made = client.post("/v1/runs", json={"workflow": "teams.approve", "payload": {"target": TARGET, **payload},
                                         "target": TARGET}, headers=actors.auth(AGENT))  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    (asked,) = wait_parked(run_id).values()
    return run_id, asked.id


WORKFLOWS = "tests.workflows,tests.team_workflows"


def test_delegate__moves_a_place_so_a_quorum_of_two_needs_two_distinct_places_and_resumes_once(
    client: TestClient, actors: Actors, stack: Stack
) -> None:
    # Given a 2-of-n approval that h1 and h2 may answer (granted), a third person h3 (no grant), a real worker
    h1, h2 = people(client, actors, 2)
    (h3,) = people(client, actors, 1, granted=False)
    worker = stack.start_worker(PARKWAY_IMPORTS=WORKFLOWS)
    try:
        run_id, iid = _start_served(client, actors, quorum=2)

        # When h1 delegates to h3: the place moves, h1 may no longer respond
        made = delegate(client, actors, iid, h1, h3)
        assert made.status_code == 200, made.text
        refused = answer(client, actors, iid, h1, YES)
        assert refused.status_code == 403, refused.text
        assert made.json()["for"] == h1
        # When h3 approves, in h1's place: 1 of 2, still pending
        first = answer(client, actors, iid, h3, YES)
        assert (first.status_code, first.json()["status"]) == (200, "pending"), first.text
        assert [(r["principal"], r["for"]) for r in read(client, actors, iid)["responses"]] == [(h3, h1)]
        # When h2 approves: two distinct places, decided
        second = answer(client, actors, iid, h2, YES)
        assert (second.status_code, second.json()["status"]) == (200, "answered"), second.text

        # Then the continuation runs once, on the worker, seeing both responses
        run = wait_status(run_id, "completed")
        assert [r["principal"] for r in (run.result or {})["responses"]] == [h3, h2]
        assert event_types(run_id).count("step.resumed") == 1
        assert [c.status for c in continuations(run_id)] == ["consumed", "consumed"]  # the start's, one resume
    finally:
        worker.terminate()


def test_delegate__one_who_responded_cannot_delegate_so_a_responder_and_a_delegate_never_make_two(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval and h1's approval in it
    h1, h2 = people(client, actors, 2)
    (h3,) = people(client, actors, 1, granted=False)
    run_id, iid = start(client, actors, "teams.approve", quorum=2)
    assert answer(client, actors, iid, h1, YES).json()["status"] == "pending"

    # When h1 tries to hand the wait on: 409 with the state, nothing moved
    refused = delegate(client, actors, iid, h1, h3)
    assert refused.status_code == 409, refused.text
    state = refused.json()["state"]
    assert (state["status"], [r["principal"] for r in state["responses"]]) == ("pending", [h1])
    assert read(client, actors, iid)["delegations"] == []
    # Then h3 holds no place, and the wait waits for a second distinct place
    assert answer(client, actors, iid, h3, YES).status_code == 403
    assert result(run_id) == ("waiting", None)
    assert answer(client, actors, iid, h2, YES).json()["status"] == "answered"


def test_delegate__onward_moves_the_place_again_never_around_a_cycle(client: TestClient, actors: Actors) -> None:
    # Given a 2-of-n approval on a team of a and e, and b and c with no grant
    a, e = people(client, actors, 2)
    b, c = people(client, actors, 2, granted=False)
    run_id, iid = start(client, actors, "teams.approve", quorum=2)

    # When a delegates to b: back to a is a cycle, and so is to oneself
    assert delegate(client, actors, iid, a, b).status_code == 200
    back = delegate(client, actors, iid, b, a)
    assert back.status_code == 422 and back.json()["error"] == "invalid_delegation", back.text
    assert delegate(client, actors, iid, b, b).status_code == 422
    # When b delegates onward to c: the place moves again, b loses it; back to a or b closes a cycle
    onward = delegate(client, actors, iid, b, c)
    assert onward.status_code == 200, onward.text
    assert answer(client, actors, iid, b, YES).status_code == 403
    assert onward.json()["for"] == a
    for to in (a, b):
        assert delegate(client, actors, iid, c, to).status_code == 422
    # Then c answers in a's place, and the record shows each move of it
    assert answer(client, actors, iid, c, YES).json()["status"] == "pending"
    assert answer(client, actors, iid, e, YES).json()["status"] == "answered"
    shown = read(client, actors, iid)
    assert [(d["by"], d["to"], d["for"]) for d in shown["delegations"]] == [(a, b, a), (b, c, a)]
    assert [(r["principal"], r["for"]) for r in shown["responses"]] == [(c, a), (e, e)]
    assert result(run_id)[0] == "completed"


def test_delegate__an_answer_that_waited_for_the_step_while_its_place_moved_gets_403(
    client: TestClient, actors: Actors
) -> None:
    # Given a first-wins wait h1 may answer, and h1's delegation to h3 holding the step's lock, not committed
    (h1,) = people(client, actors, 1)
    (h3,) = people(client, actors, 1, granted=False)
    run_id, iid = start(client, actors, "teams.approve")
    with open_transaction() as holder, ThreadPoolExecutor(1) as pool:
        store.delegate(holder, iid, principal=PrincipalRef(IDS[h1], h1, "human"), to=h3, note=None)
        # When h1's answer (its function's call) waits for the step's lock
        answered = pool.submit(sdk.answer, iid, YES, response_id="r-h1", principal=h1)

        def waiting() -> bool:
            with single_statement() as conn:  # the answer's call (its text's start)
                return bool(conn.execute(WAITING_ON_A_LOCK, {"like": "SELECT * FROM parkway_answer(%"}).all())

        wait_for(waiting, what="the answer waiting for the step's lock")
        holder.commit()
        # Then it is refused as a delegator's answer is, and the wait stays h3's to answer
        with pytest.raises(Forbidden):
            answered.result(timeout=30)
    assert answer(client, actors, iid, h3, YES).json()["status"] == "answered"
    assert [(r["principal"], r["for"]) for r in read(client, actors, iid)["responses"]] == [(h3, h1)]
    assert result(run_id)[1]["answered_by"] == h3


def test_delegate__under_assignees_only_a_delegate_answers_only_in_an_assignees_place(
    client: TestClient, actors: Actors
) -> None:
    # Given a wait only ana may answer; bo is granted on its target but not named, cy has no grant
    (ana, cy) = people(client, actors, 2, granted=False)
    (bo,) = people(client, actors, 1)
    run_id, iid = start(client, actors, "teams.approve", assignees=[ana], assignees_only=True)

    # When one who is not an assignee delegates (bo, or an admin): 403, nothing recorded
    for by in (bo, ADMIN):
        refused = delegate(client, actors, iid, by, cy)
        assert refused.status_code == 403, (by, refused.text)
    assert read(client, actors, iid)["delegations"] == []
    assert answer(client, actors, iid, cy, YES).status_code == 403
    # When ana delegates to cy: cy answers in ana's place, and ana no more
    assert delegate(client, actors, iid, ana, cy).status_code == 200
    assert answer(client, actors, iid, ana, YES).status_code == 403
    assert answer(client, actors, iid, cy, YES).json()["status"] == "answered"
    assert [(r["principal"], r["for"]) for r in read(client, actors, iid)["responses"]] == [(cy, ana)]
    assert result(run_id)[1]["answered_by"] == cy


def test_readme__a_two_person_approval_with_an_escalation(client: TestClient, actors: Actors) -> None:
    # Given the README's workflow (examples/release.py): two of on-call must approve; after an hour the leads
    # may approve too (the agent granted on both teams it addresses, as the README says; the run on on-call)
    ana, lee = people(client, actors, 2, granted=False)
    for who, team in ((ana, "team:oncall"), (lee, "team:leads"), (AGENT, "team:oncall"), (AGENT, "team:leads")):
        grant = client.post("/v1/grants", json={"principal": who, "target": team}, headers=actors.auth(ADMIN))
        assert grant.status_code == 201, grant.text
    made = client.post("/v1/runs", json={"workflow": "release.request", "target": "team:oncall",
                                         "payload": {"service": "api"}}, headers=actors.auth(AGENT))  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    drive(run_id)
    (asked,) = interactions(run_id).values()

    # When one on-call engineer approves: pending; ten minutes on, a reminder; an hour on, the leads' level
    assert answer(client, actors, asked.id, ana, YES).json()["status"] == "pending"
    pass_time(601)
    run_sweep()
    assert asked.id not in listed(client, actors, lee)
    pass_time(3000)
    run_sweep()
    assert asked.id in listed(client, actors, lee)
    # Then a lead's approval is the second: the step resumes once, with both and the level each came at
    assert answer(client, actors, asked.id, lee, YES).json()["status"] == "answered"
    assert result(run_id) == ("completed", {"deployed": True, "service": "api", "approvals": [[ana, 0], [lee, 1]]})
    types = event_types(run_id)
    assert [types.count(t) for t in ("interaction.reminded", "interaction.escalated", "step.resumed")] == [1, 1, 1]
