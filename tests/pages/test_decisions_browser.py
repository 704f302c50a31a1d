"""The Decisions page in a real headless Chromium (Selenium) against a real ``uvicorn api.app:app`` and a
real ``celery worker``: sign in, answer through the page, watch the run complete live; a screenshot is saved
to test-artifacts/decisions.png."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.api.conftest import AGENT, HUMAN, Actors, ApiServer, make_actors
from tests.pages.conftest import ARTIFACTS
from tests.pages.flows import IMPORTS
from tests.support import TARGET, Stack, interactions, wait_for

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

WAIT_S = 30


@dataclass
class Site:
    """The real stack, an HTTP client for the API, and the browser."""

    server: ApiServer
    http: httpx.Client
    actors: Actors
    browser: WebDriver

    def start(self, workflow: str, payload: dict[str, Any]) -> str:
        made = self.http.post(
            "/v1/runs",
            json={"workflow": workflow, "payload": payload, "target": TARGET},
            headers=self.actors.auth(AGENT),
        )
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.http.get(f"/v1/runs/{run_id}", headers=self.actors.auth(HUMAN)).json()
        return found

    def wait_pending(self, run_id: str, count: int = 1) -> dict[str, str]:
        """Wait until the run is parked with ``count`` pending interactions; their ids by key."""

        def parked() -> dict[str, str] | None:
            run = self.run(run_id)
            if run["status"] != "waiting" or len(run["interactions"]) != count:
                return None
            return {i["key"]: i["id"] for i in run["interactions"]}

        return wait_for(parked, timeout=WAIT_S, what=f"run {run_id} parked over HTTP")

    # ----------------------------------------------------------------- the browser

    def open(self) -> None:
        self.browser.get(f"{self.server.url}/decisions")

    def wait(self, condition: Any, what: str) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.browser, WAIT_S).until(condition, message=f"timed out waiting for {what}")

    def css(self, selector: str) -> WebElement:
        from selenium.webdriver.common.by import By

        return self.browser.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[WebElement]:
        from selenium.webdriver.common.by import By

        return self.browser.find_elements(By.CSS_SELECTOR, selector)

    def submit(self, button: WebElement) -> None:
        """Click a submit button and wait for the page it posts to."""
        old = self.css("html")
        button.click()
        self.wait(lambda _: _gone(old), "the form's response page")
        self.wait(lambda _: self.browser.execute_script("return document.readyState") == "complete", "page load")

    def wait_live(self) -> None:
        self.wait(lambda _: self.css("#live").text == "live", "the live status stream to connect")

    def card(self, interaction_id: str) -> WebElement:
        return self.css(f'article[data-interaction="{interaction_id}"]')


def _gone(element: WebElement) -> bool:
    """Whether the page this element belonged to was replaced. Selenium's ``staleness_of`` expects a
    StaleElementReferenceException; Chromium also answers "Node with given id does not belong to the
    document" when the navigation lands mid-call, which means the same."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


@pytest.fixture(scope="module")
def site(stack: Stack, browser: WebDriver) -> Iterator[Site]:
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-pages.log")
    server.start(PARKWAY_IMPORTS=IMPORTS)
    stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
    try:
        with server.client() as http:
            yield Site(server=server, http=http, actors=make_actors(http), browser=browser)
    finally:
        browser.get("about:blank")  # close the page's event stream: uvicorn waits for open streams on SIGTERM
        server.stop()


def sign_in(site: Site, who: str = HUMAN) -> None:
    site.browser.delete_all_cookies()
    site.open()
    site.css("#token").send_keys(site.actors.tokens[who])
    site.submit(site.css("form[action='/decisions/login'] button[type=submit]"))
    assert site.css(".whoami").text == f"signed in as {who} (human)"
    site.wait_live()


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
    # When someone cancels it while the page is open, the page closes it live
    canceled = site.http.post(
        f"/v1/interactions/{doomed_id}/cancel",
        json={"response_id": "browser-test", "reason": "superseded by a newer run"},
        headers=site.actors.auth(HUMAN),
    )
    assert canceled.status_code == 200
    site.wait(lambda _: site.card(doomed_id).find_element("css selector", ".closed-note").is_displayed(), "live close")
    assert "canceled" in site.card(doomed_id).find_element("css selector", ".closed-note").text
    assert not site.card(doomed_id).find_element("css selector", "form.answer").is_displayed()
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
    errors = [e["message"] for e in site.browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    # The screenshot: the whole page as the person sees it
    ARTIFACTS.mkdir(exist_ok=True)
    height = site.browser.execute_script("return document.documentElement.scrollHeight")
    site.browser.set_window_size(1280, min(int(height) + 140, 4000))
    target = ARTIFACTS / "decisions.png"
    assert site.browser.save_screenshot(str(target))
    assert target.stat().st_size > 10_000
