"""The Decisions page in a real headless Chromium (Selenium) against a real ``uvicorn api.app:app`` and a
real ``celery worker``: sign in, answer through the page, watch the run complete live; prompts asked after
the page loaded appear, answered ones leave; a screenshot is saved to $PARKWAY_TEST_ARTIFACTS/decisions.png."""

from __future__ import annotations

from tests.api.conftest import HUMAN
from tests.pages.browsing import WAIT_S, Site, sign_in
from tests.support import interactions, wait_for


def test_expired_and_canceled_prompts__are_shown_as_not_answerable(site: Site) -> None:
    # Given a question that expires after a second, and one that stays pending
    expiring = site.start("pages.ask", {"prompt": "Restart the cache now?", "expires_in": 1})
    wait_for(
        lambda: interactions(expiring).get("q") is not None and interactions(expiring)["q"].status == "expired",
        timeout=WAIT_S,
        sweep=True,
        what="the question to expire",
    )
    doomed = site.start("pages.ask", {"prompt": "Rotate the staging keys?"})
    doomed_id = site.wait_pending(doomed)["q"]
    sign_in(site)
    assert site.card(doomed_id).find_elements("css selector", "form.answer")
    # When someone cancels it while the page is open, it leaves the waiting list live and is listed as ended
    canceled = site.http.post(
        f"/v1/interactions/{doomed_id}/cancel",
        json={"response_id": "browser-test", "reason": "superseded by a newer run"},
        headers=site.actors.auth(HUMAN),
    )
    assert canceled.status_code == 200
    site.wait(lambda _: not site.all(f'#run-cards [data-interaction="{doomed_id}"]'), "the canceled prompt to leave")
    assert "canceled" in site.css(f'#ended [data-interaction="{doomed_id}"] .state').text
    # Then after a reload both are listed as ended, marked as such, with no form to answer them
    site.open()
    site.wait_live()
    ended = site.css("section:last-of-type").text
    assert "Restart the cache now?" in ended and "Rotate the staging keys?" in ended
    expired_id = interactions(expiring)["q"].id
    for interaction_id, state in ((expired_id, "expired"), (doomed_id, "canceled")):
        card = site.card(interaction_id)
        assert card.find_element("css selector", ".state").text == state
        assert "not answerable" in card.text
        assert not site.all(f'form[action*="{interaction_id}"]')
    assert "superseded by a newer run" in site.card(doomed_id).text


def test_sign_in_answer_and_approve__the_run_completes_live_on_the_page(site: Site) -> None:
    from selenium.webdriver.support.ui import Select

    # Given a run asking a permission and a question (an object with a sensitive field), and another run
    run_id = site.start("pages.deploy", {"service": "billing"})
    ids = site.wait_pending(run_id, count=2)
    other = site.start("pages.deploy", {"service": "search"})  # stays pending: the screenshot shows its forms
    site.wait_pending(other, count=2)
    token = site.actors.tokens[HUMAN]
    # When the person signs in, the pending prompts are listed with forms made from their schemas
    sign_in(site)
    assert token not in site.browser.page_source
    cookie = site.browser.get_cookie("parkway_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    plan = site.card(ids["plan"])
    assert "How should billing be deployed?" in plan.text
    assert plan.find_element("css selector", "input[name='value.otp']").get_attribute("type") == "password"
    assert site.card(ids["shell"]).find_element("css selector", "button.approve").text == "Approve"
    # And answers the question through the page
    Select(plan.find_element("css selector", "select[name='value.window']")).select_by_visible_text("tonight")
    plan.find_element("css selector", "input[name='value.replicas']").send_keys("3")
    plan.find_element("css selector", "input[name='value.notify']").click()
    plan.find_element("css selector", "input[name='value.otp']").send_keys("424242")
    plan.find_element("css selector", "textarea[name='value.labels']").send_keys('["blue", "canary"]')
    site.submit(plan.find_element("css selector", "form.answer button[type=submit]"))
    assert site.css("#notice").text.startswith("Answered “How should billing be deployed?”")
    assert "424242" not in site.browser.page_source
    # And approves the permission with the Approve button
    site.submit(site.card(ids["shell"]).find_element("css selector", "button.approve"))
    assert site.css("#notice").text.startswith("Approved: Allow shell.exec on deploy billing?")
    # Then the run's status on the page turns completed, live, without a reload
    site.wait_live()
    badge = f'#notice [data-run="{run_id}"]'
    site.wait(lambda _: site.css(badge).text == "completed", "the run to show completed")
    done = site.run(run_id)
    assert done["status"] == "completed"
    assert done["result"] == {
        "service": "billing",
        "approved": True,
        "window": "tonight",
        "replicas": 3,
        "notify": True,
        "labels": ["blue", "canary"],
        "otp_ok": True,
        "by": HUMAN,
    }
    # And both are listed as decided, the permission as approved
    assert site.card(ids["plan"]).find_element("css selector", ".state").text == "answered"
    assert site.card(ids["shell"]).find_element("css selector", ".state").text == "approved"
    assert "by api-ana" in site.card(ids["shell"]).text
    # No script error and no Content-Security-Policy violation on the way
    assert site.console_errors() == []
    # The screenshot: the whole page as the person sees it
    site.screenshot("decisions.png")


def waiting(site: Site) -> int:
    """The count the page shows next to "Waiting for a decision"."""
    return int(site.css("#count").text)


def test_live_inbox__a_prompt_asked_after_the_page_loaded_appears_as_its_runs_card_and_leaves_once_answered(
    site: Site,
) -> None:
    # Given a person on the Decisions page, its stream connected
    sign_in(site)
    before = len(site.all("#run-cards .prompt"))
    assert waiting(site) == before
    # When a run asks a permission and a question after the page was loaded
    run_id = site.start("pages.deploy", {"service": "ledger"})
    card = f'#run-cards article[data-run-of="{run_id}"]'
    # Then both appear, without a reload, as one card of that run with one "Cancel run", and the count follows
    site.wait(lambda _: len(site.all(f"{card} .prompt")) == 2, "the new run's card with both prompts")
    assert len(site.all(f"{card} form.cancel button")) == 1
    assert site.css(f"{card} form.cancel button").text == "Cancel run"
    assert site.css(f"{card} select[name='value.window']").is_displayed()
    site.wait(lambda _: waiting(site) == before + 2, "the count to include the new prompts")
    # When the permission is approved elsewhere, it leaves the card; the question stays
    ids = site.wait_pending(run_id, count=2)
    approved = site.http.post(
        f"/v1/interactions/{ids['shell']}/answer",
        json={"response_id": "live-inbox", "value": {"approved": True}},
        headers=site.actors.auth(HUMAN),
    )
    assert approved.status_code == 200, approved.text
    site.wait(lambda _: not site.all(f'#run-cards [data-interaction="{ids["shell"]}"]'), "the approved prompt to leave")
    assert site.css(f'#decided [data-interaction="{ids["shell"]}"] .state').text == "approved"
    assert len(site.all(f"{card} .prompt")) == 1 and waiting(site) == before + 1
    # And once the run is canceled, its card leaves altogether
    site.submit(site.css(f"{card} form.cancel button"))
    assert site.css("#notice").text.startswith("Canceled.")
    assert not site.all(card) and waiting(site) == before
    assert site.console_errors() == []


def test_live_inbox__a_prompt_that_expires_while_the_page_is_open_leaves_it(site: Site) -> None:
    # Given a person on the Decisions page, and a question asked afterwards that expires in a few seconds
    sign_in(site)
    before = waiting(site)
    run_id = site.start("pages.ask", {"prompt": "Flush the CDN?", "expires_in": 8})
    card = f'#run-cards article[data-run-of="{run_id}"]'
    site.wait(lambda _: site.all(card), "the new question's card")
    question = site.css(f"{card} .prompt").get_attribute("data-interaction")
    assert waiting(site) == before + 1
    # When the sweep expires it
    wait_for(
        lambda: interactions(run_id)["q"].status == "expired", timeout=WAIT_S, sweep=True, what="the question to expire"
    )
    # Then it leaves the waiting list, without a reload, and is listed as no longer answerable
    site.wait(lambda _: not site.all(card), "the expired question to leave")
    assert site.css(f'#ended [data-interaction="{question}"] .state').text == "expired"
    assert waiting(site) == before
