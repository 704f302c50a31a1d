"""Run history in a real headless Chromium against a real ``uvicorn api.app:app`` and ``celery worker``: the
run list, then one run's page following the run live while it is answered, resumes, calls a tool, records a
review and completes. A screenshot is saved to $PARKWAY_TEST_ARTIFACTS/run-history.png (var/artifacts)."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import HUMAN
from tests.pages.browsing import Site, sign_in

OTP = "602214"


def types(site: Site) -> list[str]:
    return [row.get_attribute("data-type") or "" for row in site.all("#timeline li[data-seq]")]


def test_run_history__follows_the_run_live_to_completion_and_is_screenshotted(site: Site) -> None:
    # Given a run waiting for an answer, and a person signed in
    run_id = site.start("pages.release", {"service": "atlas"})
    question = site.wait_pending(run_id)["release"]
    sign_in(site)
    # The run list shows it, waiting, and links to its history
    site.browser.get(f"{site.server.url}/runs?status=waiting")
    site.wait_live()
    row = site.css(f'tr[data-run-row="{run_id}"]')
    assert "pages.release" in row.text and "waiting" in row.text
    site.screenshot("runs.png")
    row.find_element("css selector", "a").click()
    site.wait(lambda _: site.browser.current_url.endswith(f"/runs/{run_id}"), "the run's page")
    site.wait_live()
    site.wait(lambda _: "interaction.asked" in types(site), "the question on the timeline")
    assert types(site)[0] == "run.created"
    assert site.css(f'#summary [data-run="{run_id}"]').text == "waiting"
    # When the question is answered (its OTP sensitive) while the page is open
    answered = site.http.post(
        f"/v1/interactions/{question}/answer",
        json={"response_id": "history-browser", "value": {"channel": "stable", "otp": OTP}},
        headers=site.actors.auth(HUMAN),
    )
    assert answered.status_code == 200, answered.text
    # Then, without a reload, the timeline grows to the run's completion and the tables follow
    site.wait(lambda _: "run.completed" in types(site), "the timeline to reach run.completed")
    site.wait(lambda _: site.css(f'#summary [data-run="{run_id}"]').text == "completed", "the status to follow")
    api = site.http.get(f"/v1/runs/{run_id}/events", headers=site.actors.auth(HUMAN)).json()["items"]
    seqs = [int(row.get_attribute("data-seq") or 0) for row in site.all("#timeline li[data-seq]")]
    assert seqs == [e["seq"] for e in api]  # every event once, in order
    assert [n.text for n in site.all("#timeline .n")] == [str(i) for i in range(1, len(seqs) + 1)]
    assert site.css("#event-count").text == str(len(seqs))
    who_when = "#interactions .who-when"
    site.wait(lambda _: f"by {HUMAN} at" in site.css(who_when).text, "the answer's author and time")

    # The tables are rendered again as the run's last events arrive: read them once they have settled
    def tool_call(_: Any) -> list[str]:
        tool = site.css('#tool-calls tr[data-tool="publish"]')
        return [tool.find_element("css selector", c).text for c in (".phase", ".replay", ".possibly-ran")]

    site.wait(lambda d: tool_call(d) == ["settled", "never", "no"], "the tool call settled, never replayed")
    reviews = ("findings", "verifications")
    site.wait(lambda _: [site.css(f"#reviews .{c}").text for c in reviews] == ["3", "2"], "the review's counts")
    site.wait(lambda _: "***" in site.css("#interactions").text, "the OTP masked in the interactions table")
    assert OTP not in site.browser.page_source
    # One event's details open, as a person would look at it
    completed = site.css('#timeline li[data-type="run.completed"] summary')
    completed.click()
    assert '"type"' not in completed.text and "data" in site.css('#timeline li[data-type="run.completed"] pre').text
    assert site.console_errors() == []
    # The screenshot: the whole page
    site.screenshot("run-history.png")
