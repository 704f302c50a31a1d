"""Approvals as teams make them (docs/teams.md): quorum, named approvers, delegation — over HTTP, the
continuations driven inline (``drive``) as the other API tests do."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import tests.team_workflows  # noqa: F401  (registers the team workflows in this process)
from beat.sweep import run_sweep
from models import history, store
from models.tables import Interaction, Run
from parkway.db import transaction
from parkway.errors import Forbidden
from tasks import sdk
from tests.api.conftest import ADMIN, AGENT, Actors, drive
from tests.support import TARGET, event_types, interactions, pass_time

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

    def delegate(by: str, to: str) -> Any:
        body = {"to": to, "note": "on leave"}
        return client.post(f"/v1/interactions/{iid}/delegate", json=body, headers=actors.auth(by))

    assert delegate(ana, ana).status_code == 422  # to oneself
    assert delegate(ana, AGENT).status_code == 422  # an agent could never answer
    assert delegate(bo, ana).status_code == 403  # one who may not answer may not hand it on
    made = delegate(ana, bo)
    assert made.status_code == 200 and (made.json()["to"], made.json()["by"]) == (bo, ana), made.text
    assert "interaction.delegated" in event_types(run_id)
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert [(d["to"], d["by"], d["note"]) for d in read["delegations"]] == [(bo, ana, "on leave")]
    assert answer(client, actors, iid, bo, YES).json()["status"] == "answered"
    assert delegate(ana, bo).status_code == 409  # the wait is decided


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


def test_delegate__a_disabled_delegate_may_no_longer_answer_and_an_admin_reassigns(
    client: TestClient, actors: Actors
) -> None:
    # Given ana delegated a wait to bo (no grant), and bo was disabled since
    (ana,) = people(client, actors, 1)
    bo, cy = people(client, actors, 2, granted=False)
    run_id, iid = start(client, actors, "teams.approve")
    made = client.post(f"/v1/interactions/{iid}/delegate", json={"to": bo}, headers=actors.auth(ana))
    assert made.status_code == 200, made.text
    assert client.delete(f"/v1/principals/{IDS[bo]}", headers=actors.auth(ADMIN)).status_code == 204

    # Then bo may not answer: his token is refused, and by name (the SDK) he is no live principal
    assert answer(client, actors, iid, bo, YES).status_code == 401
    with pytest.raises(Forbidden):
        sdk.answer(iid, YES, response_id="r-bo", principal=bo)
    # Nor may the wait be handed to him again
    again = client.post(f"/v1/interactions/{iid}/delegate", json={"to": bo}, headers=actors.auth(ADMIN))
    assert again.status_code == 422, again.text

    # When an admin (not granted on the team) reassigns it to cy
    moved = client.post(f"/v1/interactions/{iid}/delegate", json={"to": cy, "note": "bo left"},
                        headers=actors.auth(ADMIN))  # fmt: skip
    assert moved.status_code == 200 and moved.json()["by"] == ADMIN, moved.text
    # Then cy may answer, and the record shows both hand-overs
    assert answer(client, actors, iid, cy, YES).json()["status"] == "answered"
    read = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert [(d["to"], d["by"]) for d in read["delegations"]] == [(bo, ana), (cy, ADMIN)]
    assert result(run_id)[1]["answered_by"] == cy


def test_readme__a_two_person_approval_with_an_escalation(client: TestClient, actors: Actors) -> None:
    # Given the README's workflow: two of on-call must approve; after an hour the leads may approve too (the
    # agent granted on both teams it addresses, as the README says)
    (ana,) = people(client, actors, 1)
    (lee,) = people(client, actors, 1, granted=False)
    leads = f"team:leads-{uuid.uuid4().hex[:6]}"
    for who in (lee, AGENT):
        grant = client.post("/v1/grants", json={"principal": who, "target": leads}, headers=actors.auth(ADMIN))
        assert grant.status_code == 201, grant.text
    made = client.post("/v1/runs", json={"workflow": "release.request", "target": TARGET, "payload": {
        "service": "api", "oncall": TARGET, "leads": leads}}, headers=actors.auth(AGENT))  # fmt: skip
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
