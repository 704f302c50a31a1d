"""The Decisions page for team waits (docs/teams.md), over HTTP in-process: quorum progress on the card, a
response recorded towards the quorum, and the delegate form."""

from __future__ import annotations

from fastapi.testclient import TestClient

import tests.team_workflows  # noqa: F401  (registers the team workflows in this process)
from tests.api.conftest import ADMIN, HUMAN, Actors
from tests.api.test_teams import people
from tests.pages.conftest import Forms, start_driven
from tests.pages.test_decisions_http import PAGE, form_of, notice, sign_in
from tests.support import TARGET, interactions


def test_decisions__a_quorum_card_says_what_is_in_and_a_person_can_delegate(client: TestClient, actors: Actors) -> None:
    # Given a 2-of-n approval for the human's target, and a colleague with no grant
    (bo,) = people(client, actors, 1, granted=False)
    run_id = start_driven(client, actors, "teams.approve", {"target": TARGET, "quorum": 2})
    iid = interactions(run_id)["deploy"].id
    sign_in(client, actors.tokens[HUMAN])

    # When the human approves: recorded, not decided, and the card says so
    page = client.get(PAGE).text
    assert "0 of 2 approved" in page
    answered = client.post(f"{PAGE}/interactions/{iid}/answer", data={**form_of(page, iid), "decision": "approve"})
    assert answered.status_code == 200 and "is recorded; it needs 2 responses" in notice(answered.text)
    assert f"1 of 2 approved: {HUMAN}" in answered.text

    # And hands the prompt to bo, who may then answer it and decide
    delegate = Forms(answered.text).forms[f"/decisions/interactions/{iid}/delegate"]
    handed = client.post(f"{PAGE}/interactions/{iid}/delegate", data={**delegate, "to": bo, "note": "on leave"})
    assert handed.status_code == 200 and f"to {bo}" in notice(handed.text), notice(handed.text)
    got = client.post(f"/v1/interactions/{iid}/answer", json={"response_id": "bo-1", "value": {"approved": True}},
                      headers=actors.auth(bo))  # fmt: skip
    assert got.json()["status"] == "answered", got.text
    assert client.get(f"/v1/interactions/{iid}", headers=actors.auth(ADMIN)).json()["answered_by"] == bo
