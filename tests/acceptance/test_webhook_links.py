"""Approval links in webhook deliveries (docs/webhooks.md "Approval links"): a real worker subprocess, with
its own PARKWAY_PUBLIC_URL, sends a subscription that asks for links one absolute link per person a wait
names, at each level it reaches; a link decides as its person through its page; a delivery sent again
carries the same link."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from beat.sweep import run_sweep
from models.decisions import records
from parkway.db import transaction
from tests.acceptance.test_teams import granted_people
from tests.acceptance.webhook_receiver import IMPORTS, Receiver, subscribe
from tests.pages.conftest import Forms
from tests.support import HUMAN, TARGET, Stack, Worker, pass_time, start, wait_for, wait_parked, wait_status

PUBLIC = "https://parkway.example.test/base"

pytestmark = pytest.mark.usefixtures("own_workers")


@pytest.fixture
def worker(stack: Stack) -> Worker:
    return stack.start_worker(PARKWAY_IMPORTS=f"{IMPORTS},tests.team_workflows", PARKWAY_PUBLIC_URL=PUBLIC)


def delivered(receiver: Receiver, run_id: str, event_type: str) -> list[dict[str, Any]]:
    """The ``data`` of each delivery of the run's events of ``event_type``, in the order they arrived."""
    return [b["data"] for b in receiver.delivered() if b["type"] == event_type and b["data"]["run_id"] == run_id]


def test_links__each_person_named_gets_their_own_absolute_link__which_decides_as_them(
    stack: Stack, worker: Worker, client: TestClient, receiver: Receiver
) -> None:
    # Given a subscription asking for links, and a wait naming ko, escalating to lu at 60 s (ana, granted on
    # its target, may answer too, but is named by nothing)
    hook = subscribe(client, receiver, events=["interaction.asked", "interaction.escalated"], links=True)
    assert hook["links"] is True
    ko, lu = sorted(granted_people(2, granted=False))
    run_id = start("teams.approve", {"target": TARGET, "assignees": [ko], "escalate": [[60, [lu]]],
                                     "expires_in": 3600})  # fmt: skip
    iid = wait_parked(run_id)["deploy"].id

    # Then the question's delivery carries one absolute link, ko's
    (asked,) = wait_for(lambda: delivered(receiver, run_id, "interaction.asked"), sweep=True, what="asked delivered")
    assert [link["principal"] for link in asked["links"]] == [ko], asked
    assert asked["links"][0]["url"].startswith(f"{PUBLIC}/links/pl_")
    assert asked["interaction"]["link"] == f"{PUBLIC}/decisions"

    # When the wait escalates
    pass_time(61)
    run_sweep()
    (escalated,) = wait_for(lambda: delivered(receiver, run_id, "interaction.escalated"), sweep=True,
                            what="escalated delivered")  # fmt: skip
    # Then that delivery carries a link for each person named up to that level, new ones
    assert [link["principal"] for link in escalated["links"]] == [ko, lu], escalated
    assert not {link["url"] for link in escalated["links"]} & {link["url"] for link in asked["links"]}

    # And both deliveries sent again carry the very same links (an event and a person: one link)
    replayed = client.post(f"/v1/webhooks/{hook['id']}/replay", json={"after_seq": asked["seq"] - 1})
    assert replayed.status_code == 202, replayed.text
    again = wait_for(lambda: delivered(receiver, run_id, "interaction.escalated")[1:], sweep=True, what="sent again")
    urls = lambda data: [link["url"] for link in data["links"]]  # noqa: E731
    assert urls(delivered(receiver, run_id, "interaction.asked")[1]) == urls(asked)
    assert urls(again[0]) == urls(escalated)

    # When lu decides through their link's page
    path = urlsplit(escalated["links"][1]["url"]).path.removeprefix("/base")
    client.cookies.clear()
    page = client.get(path)
    assert page.status_code == 200 and "Allow deploy on prod?" in page.text and lu in page.text
    decided = client.post(path, data={**Forms(page.text).forms[path], "decision": "approve"})
    assert decided.status_code == 200, decided.text[:2000]

    # Then the run resumes, decided by lu at level 1, and ko's link now says it was decided
    assert wait_status(run_id, "completed").result["answered_by"] == lu
    with transaction() as session:
        record = records(session, [iid])[iid]
    assert (record["decided_by"], record["level"], record["status"]) == (lu, 1, "answered")
    assert client.get(urlsplit(asked["links"][0]["url"]).path.removeprefix("/base")).status_code == 409
    assert HUMAN not in [link["principal"] for link in asked["links"] + escalated["links"]]
