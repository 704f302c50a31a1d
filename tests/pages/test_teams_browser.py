"""A team's wait on the Decisions page in a real headless Chromium (docs/teams.md), against a real ``uvicorn
api.app:app`` and a real ``celery worker``: the quorum's progress follows the others' approvals live, without
a reload, and the approval that completes it, made on the page, resumes the run once; the run's page (saved
to $PARKWAY_TEST_ARTIFACTS/teams-run.png) lists each response."""

from __future__ import annotations

from typing import cast

from fastapi.testclient import TestClient

from tests.api.conftest import HUMAN
from tests.api.test_teams import people
from tests.pages.browsing import Site, sign_in
from tests.support import TARGET, event_types


def test_quorum__progress_follows_the_others_approvals_live_and_the_last_approval_on_the_page_resumes_once(
    site: Site,
) -> None:
    # Given a permission needing three approvals, and the human on the Decisions page
    bo, cy = people(cast(TestClient, site.http), site.actors, 2)  # it only posts: any httpx client does
    run_id = site.start("teams.approve", {"target": TARGET, "quorum": 3})
    iid = site.wait_pending(run_id)["deploy"]
    sign_in(site)
    team = f'#run-cards [data-interaction="{iid}"] .team'
    assert site.css(team).text == "0 of 3 approved — 3 more needed; you may approve"
    site.browser.execute_script("window.parkwayNotReloaded = true")  # gone if the page were loaded again

    def approve(who: str) -> None:
        body = {"response_id": f"browser-{who}", "value": {"approved": True}}
        got = site.http.post(f"/v1/interactions/{iid}/answer", json=body, headers=site.actors.auth(who))
        assert got.status_code == 200 and got.json()["status"] == "pending", got.text

    # When bo, then cy, approve over the API, the card follows each approval without a reload
    approve(bo)
    site.wait(lambda _: site.css(team).text.startswith(f"1 of 3 approved: {bo}"), "bo's approval on the card")
    approve(cy)
    second = f"2 of 3 approved: {bo}, {cy} — 1 more needed; you may approve"
    site.wait(lambda _: site.css(team).text == second, "cy's approval on the card")
    assert site.browser.execute_script("return window.parkwayNotReloaded") is True
    assert event_types(run_id).count("continuation.ready") == 1  # only the start's: nothing resumed yet

    # Then the human's approval on the page decides: the run resumes once and completes
    site.submit(site.card(iid).find_element("css selector", "button.approve"))
    assert site.css("#notice").text.startswith("Approved: Allow deploy on prod?"), site.css("#notice").text
    site.wait_live()
    site.wait(lambda _: site.css(f'#notice [data-run="{run_id}"]').text == "completed", "the run to complete")
    done = site.run(run_id)
    assert done["result"]["approved"] is True and done["result"]["answered_by"] == HUMAN
    assert [r["principal"] for r in done["result"]["responses"]] == [bo, cy, HUMAN]
    assert event_types(run_id).count("continuation.ready") == 2  # the start's and the one resume
    assert site.css(f'#decided [data-interaction="{iid}"] .state').text == "approved"

    # And the run's page lists each response, and who decided
    site.browser.get(f"{site.server.url}/runs/{run_id}")
    listed = site.all(f'[data-team-of="{iid}"] li.response')
    assert [li.get_attribute("data-principal") for li in listed] == [bo, cy, HUMAN]
    assert (
        f"3 of 3 approved: {bo}, {cy}, {HUMAN} · decided by {HUMAN} at level 0"
        in site.css(f'[data-team-of="{iid}"] p.team').text
    )
    assert site.console_errors() == []
    site.screenshot("teams-run.png")


def test_named_approver__follows_the_run_live_to_its_end_and_opens_its_history(site: Site) -> None:
    # Given a 2-of-n approval on the human's target naming bo, who holds no grant on it, and bo's approval
    # made on the Decisions page: the page says the run is waiting
    (bo,) = people(cast(TestClient, site.http), site.actors, 1, granted=False)
    run_id = site.start("teams.approve", {"target": TARGET, "quorum": 2, "assignees": [bo]})
    iid = site.wait_pending(run_id)["deploy"]
    sign_in(site, bo)
    site.submit(site.card(iid).find_element("css selector", "button.approve"))
    assert site.css("#notice").text.startswith("Your response to “Allow deploy on prod?” is recorded")
    assert site.css(f'#notice [data-run="{run_id}"]').text == "waiting"
    site.wait_live()

    # When the human's approval over the API decides, and the worker completes the run
    body = {"response_id": "browser-human", "value": {"approved": True}}
    got = site.http.post(f"/v1/interactions/{iid}/answer", json=body, headers=site.actors.auth(HUMAN))
    assert got.status_code == 200 and got.json()["status"] == "answered", got.text
    # Then bo's page follows the run, through its stream, to its completion
    site.wait(lambda _: site.css(f'#notice [data-run="{run_id}"]').text == "completed", "the run to complete")
    assert site.run(run_id)["result"]["answered_by"] == HUMAN
    # And the run's history opens for bo from the notice, listing both approvals
    site.css(f'#notice a[href="/runs/{run_id}"]').click()
    site.wait(lambda _: site.browser.current_url.endswith(f"/runs/{run_id}"), "the run's page")
    listed = site.all(f'[data-team-of="{iid}"] li.response')
    assert [li.get_attribute("data-principal") for li in listed] == [bo, HUMAN], site.css("main").text[:600]
    assert site.console_errors() == []
