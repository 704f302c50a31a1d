"""The real stack driven from a headless Chromium: a uvicorn ``api.app:app``, a ``celery worker``, an
HTTP client for the API, and helpers to wait for what the page shows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tests.api.conftest import AGENT, HUMAN, Actors, ApiServer
from tests.support import ROOT, TARGET, wait_for

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

WAIT_S = 30
ARTIFACTS = Path(os.environ.get("PARKWAY_TEST_ARTIFACTS") or ROOT / "var" / "artifacts")


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
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        # A live page replaces its elements as events arrive: an element gone between finding and reading
        # it is read again at the next poll.
        ignored = (NoSuchElementException, StaleElementReferenceException)
        wait = WebDriverWait(self.browser, WAIT_S, ignored_exceptions=ignored)
        return wait.until(condition, message=f"timed out waiting for {what}")

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

    def console_errors(self) -> list[str]:
        """Script errors and Content-Security-Policy violations logged since the last call."""
        return [e["message"] for e in self.browser.get_log("browser") if e["level"] == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        """The whole page as a PNG under ``ARTIFACTS`` (the window grown to the page's height)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        height = self.browser.execute_script("return document.documentElement.scrollHeight")
        self.browser.set_window_size(1280, min(int(height) + 140, 6000))
        target = ARTIFACTS / name
        assert self.browser.save_screenshot(str(target))
        assert target.stat().st_size > 10_000
        print(f"screenshot: {target}")
        return target

    def card(self, interaction_id: str) -> WebElement:
        """A prompt on the page: answerable (in its run's card) or listed as closed."""
        return self.css(f'[data-interaction="{interaction_id}"]')


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


def sign_in(site: Site, who: str = HUMAN) -> None:
    # Leave the page before its cookie goes: a live page without one fetches the next event's card with
    # none and logs the 401 as a console error (the decisions test saw one from the page a test before it
    # left open). WebDriver deletes only the current page's cookies, and about:blank has none: the
    # browser's own command clears them all.
    site.browser.get("about:blank")
    site.browser.execute_cdp_cmd("Network.clearBrowserCookies", {})
    site.open()
    site.css("#token").send_keys(site.actors.tokens[who])
    site.submit(site.css("form[action='/decisions/login'] button[type=submit]"))
    assert site.css(".whoami").text == f"signed in as {who} (human)"
    site.wait_live()
