"""The Decisions page for team waits (docs/teams.md), over HTTP in-process: quorum progress on the card, a
response recorded towards the quorum, the delegate form, and a response made in another's place."""

from __future__ import annotations

import html
import json
import re

from fastapi.testclient import TestClient
from sqlalchemy import select

import tests.team_workflows  # noqa: F401  (registers the team workflows in this process)
from api.routes.events import _poll
from beat.sweep import run_sweep
from models import event_log
from models.tables import Event, Principal
from parkway.db import transaction
from tests.api.conftest import HUMAN, Actors, drive
from tests.api.test_teams import people
from tests.pages.conftest import Forms, start_driven
from tests.pages.test_decisions_http import PAGE, form_of, notice, sign_in
from tests.support import TARGET, interactions, pass_time, read_stream


def test_decisions__a_person_can_hand_their_place_on_and_the_card_then_offers_them_nothing(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval for the human's target, and a colleague with no grant
    (bo,) = people(client, actors, 1, granted=False)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 2})
    iid = interactions(run_id)["deploy"].id
    sign_in(client, actors.tokens[HUMAN])
    page = client.get(PAGE).text
    assert "0 of 2 approved" in page

    # When the human hands their place to bo on the page
    delegate = Forms(page).forms[f"/decisions/interactions/{iid}/delegate"]
    handed = client.post(f"{PAGE}/interactions/{iid}/delegate", data={**delegate, "to": bo, "note": "on leave"})
    assert handed.status_code == 200 and f"to {bo}" in notice(handed.text), notice(handed.text)
    # Then their card offers them neither an answer nor a delegation, and says what is still needed
    assert not {f"/decisions/interactions/{iid}/answer", f"/decisions/interactions/{iid}/delegate"} & set(
        Forms(handed.text).forms
    )
    assert _team_line(handed.text, iid) == "0 of 2 approved — 2 more needed"
    # And bo answers in their place
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "bo-1", "value": {"approved": True}},
                      headers=actors.auth(bo))  # fmt: skip
    assert got.json()["status"] == "pending", got.text
    assert _team_line(client.get(PAGE).text, iid) == f"1 of 2 approved: {bo} (for {HUMAN}) — 1 more needed"


def _text(page: str) -> str:
    """A page's text as a person reads it (tags dropped, spaces collapsed)."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _team_line(page: str, interaction_id: str) -> str:
    """What a card says of its wait's team (progress, what is still needed, the level)."""
    found = re.search(rf'data-interaction="{interaction_id}".*?<p class="team"[^>]*>(.*?)</p>', page, re.S)
    assert found, page[:3000]
    return _text(found.group(1)).strip()


def test_decisions__a_quorum_card_says_what_is_still_needed_and_no_second_form_once_responded(
    client: TestClient, actors: Actors
) -> None:
    # Given a 3-of-n approval that one colleague has approved over the API
    (bo,) = people(client, actors, 1)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 3})
    iid = interactions(run_id)["deploy"].id
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "bo-1", "value": {"approved": True}},
                      headers=actors.auth(bo))  # fmt: skip
    assert got.json()["status"] == "pending", got.text
    sign_in(client, actors.tokens[HUMAN])

    # Then the human's card says what is in, what is still needed, and that they may approve
    page = client.get(PAGE).text
    assert _team_line(page, iid) == f"1 of 3 approved: {bo} — 2 more needed; you may approve"
    assert f"/decisions/interactions/{iid}/answer" in Forms(page).forms

    # When the human approves on the page, the card says so and offers no answer form again
    answered = client.post(f"{PAGE}/interactions/{iid}/answer", data={**form_of(page, iid), "decision": "approve"})
    assert answered.status_code == 200, notice(answered.text)
    assert _team_line(answered.text, iid) == f"2 of 3 approved: {bo}, {HUMAN} — 1 more needed; you approved"
    assert f"/decisions/interactions/{iid}/answer" not in Forms(answered.text).forms
    assert f"/decisions/interactions/{iid}/delegate" not in Forms(answered.text).forms  # a place responded in stays
    # And its run's card, as the live page fetches it, says the same
    card = client.get(f"{PAGE}/runs/{run_id}/card").text
    assert _team_line(card, iid).endswith("1 more needed; you approved")
    assert f"/decisions/interactions/{iid}/answer" not in Forms(card).forms


def test_run_page__lists_each_response_the_decision_and_its_level_and_the_delegations_never_a_secret(
    client: TestClient, actors: Actors
) -> None:
    # Given a question needing two responses (a note and a sensitive pin)
    (bo,) = people(client, actors, 1)
    (cy,) = people(client, actors, 1, granted=False)
    run_id = start_driven(client, actors, "teams.ask", {"target": TARGET, "quorum": 2})
    iid = interactions(run_id)["pin"].id
    pins = {bo: "731902", cy: "518337"}

    def respond(who: str, note: str) -> str:
        body = {"response_id": f"r-{who}", "value": {"note": note, "pin": pins[who]}}
        got = client.post(f"/v1/interactions/{iid}/answer", json=body, headers=actors.auth(who))
        assert got.status_code == 200, got.text
        return str(got.json()["status"])

    # When bo responds, the human hands the prompt to cy (no grant), and cy's response decides
    assert respond(bo, "from bo") == "pending"
    sign_in(client, actors.tokens[HUMAN])
    pending_page = client.get(PAGE).text
    assert f"1 of 2 answered: {bo}" in _team_line(pending_page, iid)
    delegate = Forms(pending_page).forms[f"/decisions/interactions/{iid}/delegate"]
    handed = client.post(f"{PAGE}/interactions/{iid}/delegate", data={**delegate, "to": cy, "note": "bo's pair"})
    assert handed.status_code == 200, notice(handed.text)
    assert respond(cy, "from cy") == "answered"
    drive(run_id)

    # Then the run page lists each response: who, the value as readers see it, when, at which level
    page = client.get(f"/runs/{run_id}").text
    rows = re.findall(r'<li class="response"[^>]*data-principal="([^"]+)"[^>]*>(.*?)</li>', page, re.S)
    assert [who for who, _ in rows] == [bo, cy], page[:3000]
    for (_, row), note in zip(rows, ("from bo", "from cy"), strict=True):
        shown = _text(row)
        assert note in shown and '"pin": "***"' in shown and "level 0" in shown, shown
    # And the decision with who made it and at which level, and the delegation with its note
    team = _text(re.search(rf'<tr class="team" data-team-of="{iid}">(.*?)</tr>', page, re.S).group(1))  # type: ignore[union-attr]
    assert f"2 of 2 answered: {bo}, {cy} (for {HUMAN})" in team, team
    assert f"decided by {cy} (for {HUMAN}) at level 0" in team, team
    assert f"{HUMAN} handed it to {cy}: “bo's pair”" in team, team
    # And the timeline says who responded and who handed it on
    assert f"“pin” responded by {bo} (1 of 2)" in _text(page) and f"“pin” delegated by {HUMAN} to {cy}" in _text(page)
    # A sensitive value is on no page: the run's, its live parts, the Decisions page
    shown_pages = (page, client.get(f"/runs/{run_id}/parts").text, pending_page, handed.text, client.get(PAGE).text)
    assert not [pin for pin in pins.values() for shown in shown_pages if pin in shown]


def test_decisions_stream__delivers_a_team_waits_events_to_the_people_it_names(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval naming bo, who holds no grant on its target, and the stream's cursor now
    bo, cy = people(client, actors, 2, granted=False)
    with transaction() as session:
        after = event_log.stream_cursor(session)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 2, "assignees": [bo]})
    iid = interactions(run_id)["deploy"].id
    # When bo approves, and the human hands their place to cy
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "bo-1", "value": {"approved": True}},
                      headers=actors.auth(bo))  # fmt: skip
    assert got.json()["status"] == "pending", got.text
    handed = client.post(f"/v1/interactions/{iid}/delegate", json={"to": cy}, headers=actors.auth(HUMAN))
    assert handed.status_code == 200, handed.text

    # Then the poll behind the Decisions page's stream gives bo and cy the wait's events, as it does the human
    with transaction() as session:
        through = max(session.scalars(select(Event.seq).where(Event.run_id == run_id)))

    def seen(name: str) -> list[str]:
        def poll(cursor: int) -> tuple[list[tuple[int, str]], int]:
            polled = _poll(lambda session: session.scalar(select(Principal).where(Principal.name == name)), cursor)
            assert polled is not None
            return polled

        got = read_stream(poll, after, through, what=f"{name}'s stream past the delegation")
        return [json.loads(data)["type"] for _, data in got if json.loads(data)["run_id"] == run_id]

    assert {"interaction.responded", "interaction.delegated"} <= set(seen(HUMAN))
    assert {"interaction.responded", "interaction.delegated"} <= set(seen(bo)), seen(bo)
    assert "interaction.delegated" in seen(cy), seen(cy)


def test_escalated_wait__the_card_and_the_run_page_say_the_level_reached_and_at_which_level_it_was_decided(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval that opens to bo (no grant) after 300 s, and those 300 s passed
    (bo,) = people(client, actors, 1, granted=False)
    run_id = start_driven(client, actors, "teams.approve",
                          {"target": TARGET, "quorum": 2, "escalate": [[300, [bo]]], "expires_in": 3600})  # fmt: skip
    iid = interactions(run_id)["deploy"].id
    pass_time(301)
    run_sweep()
    assert interactions(run_id)["deploy"].level == 1
    # Then the human's card says the level reached and whom it brought in
    sign_in(client, actors.tokens[HUMAN])
    assert _team_line(client.get(PAGE).text, iid).endswith(f"you may approve · level 1 reached ({bo})")
    # When the human, then bo, approve, the run page says who decided at which level, and each response's level
    for who in (HUMAN, bo):
        body = {"response_id": f"esc-{who}", "value": {"approved": True}}
        got = client.post(f"/v1/interactions/{iid}/answer", json=body, headers=actors.auth(who))
        assert got.status_code == 200, got.text
    drive(run_id)
    page = client.get(f"/runs/{run_id}").text
    team = _text(re.search(rf'<tr class="team" data-team-of="{iid}">(.*?)</tr>', page, re.S).group(1))  # type: ignore[union-attr]
    assert f"2 of 2 approved: {HUMAN}, {bo} · decided by {bo} at level 1 · level 1 reached ({bo})" in team, team
    assert f"{bo} approved at" in team and "level 1" in team
    assert f"“deploy” escalated to level 1 ({bo})" in _text(page)


def test_delegated_place__the_card_and_the_run_page_say_bo_for_ana(client: TestClient, actors: Actors) -> None:
    # Given a 2-of-n approval: ana (the human) hands her place to bo (no grant), who approves in it
    (bo,) = people(client, actors, 1, granted=False)
    (cy,) = people(client, actors, 1)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 2})
    iid = interactions(run_id)["deploy"].id
    handed = client.post(f"/v1/interactions/{iid}/delegate", json={"to": bo}, headers=actors.auth(HUMAN))
    assert handed.status_code == 200, handed.text
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "bo-1", "value": {"approved": True}},
                      headers=actors.auth(bo))  # fmt: skip
    assert got.json()["status"] == "pending", got.text

    # Then cy's Decisions card says bo approved for ana, and cy may approve
    sign_in(client, actors.tokens[cy])
    card = _team_line(client.get(PAGE).text, iid)
    assert card == f"1 of 2 approved: {bo} (for {HUMAN}) — 1 more needed; you may approve", card
    # When cy approves, the run page lists bo's response as made for ana, and the delegation
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "cy-1", "value": {"approved": True}},
                      headers=actors.auth(cy))  # fmt: skip
    assert got.json()["status"] == "answered", got.text
    drive(run_id)
    page = client.get(f"/runs/{run_id}").text
    rows = re.findall(r'<li class="response"[^>]*data-principal="([^"]+)"[^>]*>(.*?)</li>', page, re.S)
    assert [(who, _text(row).split(" approved ")[0].strip()) for who, row in rows] == [
        (bo, f"{bo} (for {HUMAN})"), (cy, cy)
    ], page[:3000]  # fmt: skip
    team = _text(re.search(rf'<tr class="team" data-team-of="{iid}">(.*?)</tr>', page, re.S).group(1))  # type: ignore[union-attr]
    assert f"2 of 2 approved: {bo} (for {HUMAN}), {cy}" in team and f"{HUMAN} handed it to {bo}" in team, team


def test_run_page__the_people_a_wait_names_read_its_run_and_history_without_a_grant_on_its_target(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval on the human's target naming bo (an assignee), opening to cy (an escalation
    # level, reached), the human's place handed to dee (a delegate): none of them granted on the target
    bo, cy, dee, eve = people(client, actors, 4, granted=False)
    team = {"quorum": 2, "assignees": [bo], "escalate": [[300, [cy]]], "expires_in": 3600}
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, **team})
    iid = interactions(run_id)["deploy"].id
    handed = client.post(f"/v1/interactions/{iid}/delegate", json={"to": dee}, headers=actors.auth(HUMAN))
    assert handed.status_code == 200, handed.text
    pass_time(301)
    run_sweep()
    # Then each reads the run's page (the history the Decisions card links to), the run, and its events
    for who in (bo, cy, dee):
        sign_in(client, actors.tokens[who])
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200 and f'data-team-of="{iid}"' in page.text, (who, _text(page.text)[:600])
        assert client.get(f"/v1/runs/{run_id}", headers=actors.auth(who)).status_code == 200, who
        events = client.get(f"/v1/runs/{run_id}/events", headers=actors.auth(who))
        assert events.status_code == 200 and "interaction.escalated" in events.text, (who, events.text[:300])
    # And someone the wait does not name still reads none of it
    sign_in(client, actors.tokens[eve])
    refused = client.get(f"/runs/{run_id}")
    assert refused.status_code == 403 and "holds no grant on the target of run" in _text(refused.text)
    assert client.get(f"/v1/runs/{run_id}/events", headers=actors.auth(eve)).status_code == 403


def test_recently_decided__lists_each_person_s_own_decision_whatever_their_grants(
    client: TestClient, actors: Actors
) -> None:
    # Given a 2-of-n approval on the human's target naming bo, the human's place handed to dee (neither granted)
    bo, dee = people(client, actors, 2, granted=False)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 2, "assignees": [bo]})
    iid = interactions(run_id)["deploy"].id
    handed = client.post(f"/v1/interactions/{iid}/delegate", json={"to": dee}, headers=actors.auth(HUMAN))
    assert handed.status_code == 200, handed.text
    # When bo approves, and dee's approval decides
    for who, status in ((bo, "pending"), (dee, "answered")):
        got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": f"rd-{who}",
                          "value": {"approved": True}}, headers=actors.auth(who))  # fmt: skip
        assert got.json()["status"] == status, got.text
    drive(run_id)
    # Then "Recently decided" on each one's Decisions page ("for me", the default) lists it, decided by dee
    for who in (bo, dee):
        sign_in(client, actors.tokens[who])
        decided = re.search(r'<section id="decided">(.*?)</section>', client.get(PAGE).text, re.S)
        assert decided is not None and f'data-interaction="{iid}"' in decided.group(1), (who, decided)
        assert f"by {dee}" in _text(decided.group(1)), _text(decided.group(1))
