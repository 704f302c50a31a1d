"""Run history pages over HTTP (in-process): who may see which run, the filters, and what a run's page shows
(events in order, steps, interactions with who answered, tool calls, reviews), never a sealed value.
Continuations are driven in this process, as a worker would."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, HUMAN, STRANGER, Actors, drive
from tests.api.test_access import UNSTORABLE_POSITIONS
from tests.pages.conftest import Forms, start_driven
from tests.support import wait_for

OTP = "913377"


def sign_in(client: TestClient, token: str, next_path: str = "") -> None:
    client.cookies.clear()
    login = Forms(client.get("/decisions").text).forms["/decisions/login"]
    data = {**login, "token": token, **({"next": next_path} if next_path else {})}
    response = client.post("/decisions/login", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == (next_path or "/decisions")


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def released(client: TestClient, actors: Actors) -> str:
    """A pages.release run answered (with its sensitive field) and driven to completion."""
    run_id = start_driven(client, actors, "pages.release", {"service": "atlas"})
    listed = client.get("/v1/interactions", params={"run_id": run_id}, headers=actors.auth(HUMAN)).json()["items"]
    answered = client.post(
        f"/v1/interactions/{listed[0]['id']}/answer",
        json={"response_id": "history-1", "value": {"channel": "beta", "otp": OTP}},
        headers=actors.auth(HUMAN),
    )
    assert answered.status_code == 200, answered.text
    drive(run_id)
    assert client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()["status"] == "completed"
    return run_id


def test_runs__signed_out_is_the_sign_in_form_and_signing_in_leads_back(client: TestClient, actors: Actors) -> None:
    client.cookies.clear()
    page = client.get("/runs")
    assert page.status_code == 200 and 'action="/decisions/login"' in page.text
    assert Forms(page.text).forms["/decisions/login"]["next"] == "/runs"
    sign_in(client, actors.tokens[HUMAN], next_path="/runs")
    assert f"signed in as <strong>{HUMAN}</strong>" in client.get("/runs").text
    # A next that is not one of the pages leads to the Decisions page instead
    client.cookies.clear()
    login = Forms(client.get("/decisions").text).forms["/decisions/login"]
    elsewhere = client.post(
        "/decisions/login",
        data={**login, "token": actors.tokens[HUMAN], "next": "//evil.example/runs"},
        follow_redirects=False,
    )
    assert elsewhere.status_code == 303 and elsewhere.headers["location"] == "/decisions"


def test_runs__lists_what_the_api_would_show_filtered_by_status_and_workflow(
    client: TestClient, actors: Actors
) -> None:
    waiting = start_driven(client, actors, "pages.ask", {"prompt": "History list?"})
    done = released(client, actors)
    sign_in(client, actors.tokens[HUMAN])
    everything = client.get("/runs").text
    assert waiting in everything and done in everything
    assert everything.index(done) < everything.index(waiting)  # newest first
    only_waiting = client.get("/runs", params={"status": "waiting"}).text
    assert waiting in only_waiting and done not in only_waiting
    only_release = client.get("/runs", params={"workflow": "pages.release"}).text
    assert done in only_release and waiting not in only_release
    assert client.get("/runs", params={"status": "nonsense"}).status_code == 200  # an unknown status: no filter
    for forged in UNSTORABLE_POSITIONS:  # not a cursor these pages handed out: their first page
        assert done in client.get("/runs", params={"cursor": forged}).text
        assert client.get("/decisions", params={"cursor": forged}).status_code == 200
    # A person without a grant on the runs' target sees none of them, and is refused each run's history
    sign_in(client, actors.tokens[STRANGER])
    assert done not in client.get("/runs").text
    refused = client.get(f"/runs/{done}")
    assert refused.status_code == 403 and "holds no grant" in text_of(refused.text)
    assert client.get(f"/runs/{done}/timeline").status_code == 403
    assert client.get(f"/runs/{done}/parts").status_code == 403
    assert client.get("/runs/r_never_was").status_code == 404
    # An admin reads every run
    sign_in(client, actors.tokens[ADMIN])
    assert done in client.get("/runs").text and client.get(f"/runs/{done}").status_code == 200


def test_run_page__shows_status_events_steps_interactions_tools_and_reviews_never_the_sealed_value(
    client: TestClient, actors: Actors
) -> None:
    run_id = released(client, actors)
    sign_in(client, actors.tokens[HUMAN])

    def shown_to_the_end() -> str | None:
        # The page shows the events below its stream's cursor: one another writer holds back comes by the stream.
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200, page.text
        return page.text if 'data-type="run.completed"' in page.text else None

    body = wait_for(shown_to_the_end, what="the run's page to show its events up to run.completed")
    assert OTP not in body
    api_events = client.get(f"/v1/runs/{run_id}/events", headers=actors.auth(HUMAN)).json()["items"]
    # The timeline: every event of the run, one line each, in seq order
    seqs = [int(s) for s in re.findall(r'<li data-seq="(\d+)"', body)]
    types = re.findall(r'<li data-seq="\d+" data-type="([a-z_.]+)"', body)
    assert seqs == [e["seq"] for e in api_events]
    assert types == [e["type"] for e in api_events]
    assert types[0] == "run.created" and types[-1] == "run.completed"
    # Steps, the interaction with who answered it and when, the tool call and the review
    steps = re.search(r'<table class="grid" id="steps">(.*?)</table>', body, re.S)
    assert steps and "pages.release" in steps.group(1) and "pages.release_apply" in steps.group(1)
    row = re.search(r'<tr data-interaction="[^"]+">(.*?)</tr>', body, re.S)
    assert row is not None
    assert re.search(rf"by {HUMAN} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text_of(row.group(1)))
    assert '"otp": "***"' in html.unescape(row.group(1)) and '"channel": "beta"' in html.unescape(row.group(1))
    tool = re.search(r'<tr data-tool="publish">(.*?)</tr>', body, re.S)
    assert tool is not None
    assert re.findall(r'class="(?:phase|replay|possibly-ran)">([^<]+)<', tool.group(1)) == ["settled", "never", "no"]
    review = re.search(r"<tr data-review=[^>]+>(.*?)</tr>", body, re.S)
    assert review is not None and "release-check" in review.group(1) and "clean" in review.group(1)
    assert re.findall(r'class="(?:findings|verifications)">(\d+)<', review.group(1)) == ["3", "2"]
    assert ">completed<" in body and 'data-stream="/decisions/stream?after=' in body
    # The live fragments: rows after a seq, and the tables
    later = client.get(f"/runs/{run_id}/timeline", params={"after": seqs[-2]}).text
    assert re.findall(r'<li data-seq="(\d+)"', later) == [str(seqs[-1])]
    assert OTP not in client.get(f"/runs/{run_id}/parts").text
    client.cookies.clear()
    assert client.get(f"/runs/{run_id}/timeline").status_code == 401
