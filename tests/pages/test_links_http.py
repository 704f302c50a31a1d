"""Approval links (docs/teams.md "Approval links") over HTTP in-process, on the real database: a GET only
shows, a POST decides once as the link's person, with the API's 409, 410 and 403, through the store's own
answer (quorum and delegation hold), and the justification is recorded."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import select, text

import tests.team_workflows  # noqa: F401  (registers the team workflows in this process)
from beat.sweep import run_sweep
from models.decisions import records
from models.tables import Event, Interaction
from parkway.db import transaction
from parkway.settings import get_settings
from tests.api.conftest import ADMIN, AGENT, AGENT2, HUMAN, Actors, drive
from tests.api.test_teams import IDS, people, start
from tests.pages.conftest import Forms
from tests.pages.test_decisions_http import notice, sign_in
from tests.support import pass_time, run_status


def hand_out(client: TestClient, actors: Actors, iid: str, person: str, *, by: str = ADMIN, **body: Any) -> str:
    """A new link for ``person`` on ``iid``, handed out over the API by ``by``: its path (the URL is absolute)."""
    made = client.post(f"/v1/interactions/{iid}/links", json={"principal": person, **body}, headers=actors.auth(by))
    assert made.status_code == 201, made.text
    url = made.json()["url"]
    assert url.startswith(f"{get_settings().public_base}/links/pl_"), url
    return urlsplit(url).path


def fresh(client: TestClient) -> TestClient:
    """The client as a browser that never signed in (a mail scanner, a phone opening the link)."""
    client.cookies.clear()
    return client


def decide(client: TestClient, path: str, **fields: str) -> httpx.Response:
    """Open the link, then post its form (a permission's ``decision``, a ``justification``) from that page."""
    page = client.get(path)
    assert page.status_code == 200, page.text[:2000]
    return client.post(path, data={**Forms(page.text).forms[path], **fields})


def written(run_id: str, iid: str) -> Any:
    """Everything a decision writes for this wait: its events, its row, its responses and its links."""
    from models.link_tables import ApprovalLink

    with transaction() as session:
        events = session.execute(select(Event.seq, Event.type).where(Event.run_id == run_id)).all()
        row = session.execute(select(Interaction.status, Interaction.answered_by_id, Interaction.closed_at,
                                     Interaction.level).where(Interaction.id == iid)).one()  # fmt: skip
        responses = session.execute(text("SELECT principal_id, response_id FROM interaction_responses "
                                         "WHERE interaction_id = :i ORDER BY 1"), {"i": iid}).all()  # fmt: skip
        made = session.execute(select(ApprovalLink.id, ApprovalLink.used_at, ApprovalLink.response_id,
                                      ApprovalLink.justification).where(ApprovalLink.interaction_id == iid)
                               .order_by(ApprovalLink.id)).all()  # fmt: skip
    return [tuple(e) for e in events], tuple(row), [tuple(r) for r in responses], [tuple(m) for m in made]


def record_of(iid: str) -> dict[str, Any]:
    with transaction() as session:
        return records(session, [iid])[iid]


def test_link__opened_three_times_changes_nothing__its_post_decides_once_as_its_person(
    client: TestClient, actors: Actors
) -> None:
    # Given a wait and a link to it for the human, handed out by the admin
    run_id, iid = start(client, actors, "teams.approve")
    path = hand_out(client, actors, iid, HUMAN)
    before = written(run_id, iid)

    # When a mail scanner fetches the link three times
    for _ in range(3):
        shown = fresh(client).get(path)
        assert shown.status_code == 200 and "Allow deploy on prod?" in shown.text and HUMAN in shown.text
    # Then nothing was written: no event, no decision, the link unused
    assert written(run_id, iid) == before

    # When the person approves from the page, with a justification
    form = Forms(fresh(client).get(path).text).forms[path]
    got = client.post(path, data={**form, "decision": "approve", "justification": "tested on staging"})
    # Then it is decided once, as that person, and the page shows the receipt
    assert got.status_code == 200 and notice(got.text).startswith("Approved: Allow deploy on prod?"), got.text[:2000]
    assert "status answered" in notice(got.text) and "link-" in notice(got.text)
    state = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()
    assert (state["status"], state["answered_by"]) == ("answered", HUMAN)
    drive(run_id)
    assert run_status(run_id) == "completed"
    assert record_of(iid)["responses"][0]["justification"] == "tested on staging"

    # And the same form posted again is a 409 saying who decided, and writes nothing
    after = written(run_id, iid)
    again = client.post(path, data={**form, "decision": "reject"})
    assert again.status_code == 409 and f"already answered by {HUMAN}" in notice(again.text), again.text[:2000]
    assert written(run_id, iid) == after


def test_link__a_post_without_the_page_s_csrf_token_decides_nothing(client: TestClient, actors: Actors) -> None:
    run_id, iid = start(client, actors, "teams.approve")
    path = hand_out(client, actors, iid, HUMAN)
    before = written(run_id, iid)
    refused = fresh(client).post(path, data={"decision": "approve", "csrf": "0" * 64})
    assert refused.status_code == 403 and "expired" in notice(refused.text)
    assert written(run_id, iid) == before


def test_link__after_the_wait_ends_it_is_410_and_decides_nothing(client: TestClient, actors: Actors) -> None:
    # Given two waits with a link each: one canceled, one past its expiry
    canceled_run, canceled = start(client, actors, "teams.approve")
    expired_run, expired = start(client, actors, "teams.approve", expires_in=60)
    to_canceled, to_expired = hand_out(client, actors, canceled, HUMAN), hand_out(client, actors, expired, HUMAN)
    page = fresh(client).get(to_canceled)
    assert Forms(page.text).forms.get(to_canceled), "the link's form while the wait is pending"
    cancel = {"response_id": "c-1"}
    assert (
        client.post(f"/v1/interactions/{canceled}/cancel", json=cancel, headers=actors.auth(AGENT)).status_code == 200
    )
    pass_time(120)
    run_sweep()

    # Then each link shows 410 and offers no form; a post of the earlier page is 410 and writes nothing
    for run_id, iid, path in ((canceled_run, canceled, to_canceled), (expired_run, expired, to_expired)):
        shown = fresh(client).get(path)
        assert shown.status_code == 410 and "can no longer be answered" in notice(shown.text), shown.text[:2000]
        assert path not in Forms(shown.text).forms
        before = written(run_id, iid)
        late = client.post(path, data={"decision": "approve", "csrf": Forms(page.text).forms[to_canceled]["csrf"]})
        assert late.status_code == 410
        assert written(run_id, iid) == before


def test_link__its_person_disabled_or_their_grant_revoked_is_403(client: TestClient, actors: Actors) -> None:
    # Given two granted colleagues, each with a link to one wait, and the pages they opened
    bo, cy = people(client, actors, 2)
    run_id, iid = start(client, actors, "teams.approve")
    to_bo, to_cy = hand_out(client, actors, iid, bo), hand_out(client, actors, iid, cy)
    forms = {path: Forms(fresh(client).get(path).text).forms[path] for path in (to_bo, to_cy)}

    # When bo is disabled and cy's grant is revoked
    assert client.delete(f"/v1/principals/{IDS[bo]}", headers=actors.auth(ADMIN)).status_code == 204
    assert client.delete(f"/v1/grants/{actors.grants[cy]}", headers=actors.auth(ADMIN)).status_code == 204

    # Then both links are refused at once, on GET and on POST, and nothing is decided
    before = written(run_id, iid)
    for path, why in ((to_bo, "may no longer decide"), (to_cy, "holds no place")):
        shown = fresh(client).get(path)
        assert shown.status_code == 403 and why in notice(shown.text), shown.text[:2000]
        posted = client.post(path, data={**forms[path], "decision": "approve"})
        assert posted.status_code == 403
    assert written(run_id, iid) == before


def test_link__a_browser_signed_in_as_someone_else_cannot_use_it(client: TestClient, actors: Actors) -> None:
    # Given a link for bo, opened in a browser where the human is signed in to the Decisions page
    (bo,) = people(client, actors, 1)
    run_id, iid = start(client, actors, "teams.approve")
    path = hand_out(client, actors, iid, bo)
    form = Forms(fresh(client).get(path).text).forms[path]
    sign_in(client, actors.tokens[HUMAN])
    before = written(run_id, iid)

    # Then the page refuses it, and its form posted from that browser decides nothing
    shown = client.get(path)
    assert shown.status_code == 403 and f"signed in as {HUMAN}" in notice(shown.text)
    posted = client.post(path, data={**form, "decision": "approve"})
    assert posted.status_code == 403 and f"this link is for {bo}" in notice(posted.text)
    assert written(run_id, iid) == before
    # And bo, signed in as themself, may
    sign_in(client, actors.tokens[bo])
    assert decide(client, path, decision="approve").status_code == 200


def test_link__quorum_and_delegation_hold_through_links_as_through_the_api(client: TestClient, actors: Actors) -> None:
    # Given a 2-of-n approval, and a colleague with no grant to whom the human hands their place
    bo, cy = people(client, actors, 2)
    (dee,) = people(client, actors, 1, granted=False)
    run_id, iid = start(client, actors, "teams.approve", quorum=2)
    to_human = hand_out(client, actors, iid, HUMAN)
    assert (
        client.post(f"/v1/interactions/{iid}/links", json={"principal": dee}, headers=actors.auth(ADMIN)).status_code
        == 422
    )  # fmt: skip  (no place: no link)
    handed = client.post(f"/v1/interactions/{iid}/delegate", json={"to": dee}, headers=actors.auth(HUMAN))
    assert handed.status_code == 200, handed.text

    # Then the human's link no longer decides (their place moved), and dee's does, in the human's place
    assert fresh(client).get(to_human).status_code == 403
    first = decide(fresh(client), hand_out(client, actors, iid, dee), decision="approve")
    assert first.status_code == 200 and "needs 2 responses" in notice(first.text), notice(first.text)
    # And a second link of the same person adds no second response: a place responds once
    twice = decide(fresh(client), hand_out(client, actors, iid, dee), decision="approve")
    assert twice.status_code == 409, twice.text[:2000]
    # And the second place's approval decides the wait: a link made before then is 409 after, a new one refused
    to_cy = hand_out(client, actors, iid, cy)
    assert decide(fresh(client), hand_out(client, actors, iid, bo), decision="approve").status_code == 200
    assert fresh(client).get(to_cy).status_code == 409
    late = client.post(f"/v1/interactions/{iid}/links", json={"principal": cy}, headers=actors.auth(ADMIN))
    assert late.status_code == 409 and late.json()["state"]["status"] == "answered", late.text
    drive(run_id)
    responses = [(r["principal"], r["for"]) for r in record_of(iid)["responses"]]
    assert sorted(responses, key=str) == sorted([(dee, HUMAN), (bo, None)], key=str)
    assert record_of(iid)["status"] == "answered"


def test_link__a_wait_asking_for_justification_refuses_a_decision_without_one(
    client: TestClient, actors: Actors
) -> None:
    run_id, iid = start(client, actors, "teams.approve", justify=True)
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()["justify"] is True
    path = hand_out(client, actors, iid, HUMAN)
    page = fresh(client).get(path)
    assert 'name="justification"' in page.text and "required" in page.text.split('name="justification"')[1][:80]
    before = written(run_id, iid)
    bare = decide(fresh(client), path, decision="reject", justification="  ")
    assert bare.status_code == 422 and "justification" in notice(bare.text)
    assert written(run_id, iid) == before
    why = decide(fresh(client), path, decision="reject", justification="prod is frozen this week")
    assert why.status_code == 200 and notice(why.text).startswith("Rejected"), notice(why.text)
    assert record_of(iid)["responses"][0]["justification"] == "prod is frozen this week"


def test_links_api__admins_and_the_run_s_owner_hand_them_out__to_people_with_a_place__stored_hashed(
    client: TestClient, actors: Actors
) -> None:
    _, iid = start(client, actors, "teams.approve", expires_in=3600)
    body = {"principal": HUMAN}
    # The owner agent and admins may; another agent, a human may not
    owner = client.post(f"/v1/interactions/{iid}/links", json=body, headers=actors.auth(AGENT))
    assert owner.status_code == 201, owner.text
    for who, status in ((AGENT2, 403), (HUMAN, 403)):
        got = client.post(f"/v1/interactions/{iid}/links", json=body, headers=actors.auth(who))
        assert got.status_code == status, (who, got.text)
    # Nobody, an agent, or a person without a place: 422
    for name in ("nobody-at-all", AGENT, "api-eve"):
        got = client.post(f"/v1/interactions/{iid}/links", json={"principal": name}, headers=actors.auth(ADMIN))
        assert got.status_code == 422, (name, got.text)
    # It expires with the wait, or sooner when asked
    wait_expiry = client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()["expires_at"]
    assert owner.json()["expires_at"] == wait_expiry
    sooner = client.post(f"/v1/interactions/{iid}/links", json={**body, "expires_in": 60}, headers=actors.auth(ADMIN))
    assert sooner.json()["expires_at"] < wait_expiry
    # Only the token's hash is stored
    from models.link_tables import ApprovalLink

    token = owner.json()["url"].rsplit("/", 1)[1]
    with transaction() as session:
        stored = json.dumps([list(map(str, r)) for r in session.execute(select(ApprovalLink.__table__)).all()])
    assert token not in stored
