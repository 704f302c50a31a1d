"""An approval link's page in a real headless Chromium on a phone's width (390 px), against a real ``uvicorn
api.app:app`` (its PARKWAY_PUBLIC_URL its own address) and a real ``celery worker``: the page fits the width,
its Approve decides as the link's person and the run resumes; the access log never holds the link's token.
The page is saved as a screenshot in the test's temporary directory (``approval-link-390.png``; its path is
printed) and under $PARKWAY_TEST_ARTIFACTS."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.api.conftest import ADMIN, HUMAN, ApiServer, make_actors
from tests.pages.browsing import ARTIFACTS, Site
from tests.pages.conftest import chromium
from tests.pages.flows import IMPORTS
from tests.support import TARGET, Stack, wait_status

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

PHONE = (390, 844)


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless Chromium with a phone's window (390 px wide)."""
    profile = tmp_path_factory.mktemp("chromium-phone")
    with chromium(profile, logs={"browser": "ALL"}, flags=(f"--window-size={PHONE[0]},{PHONE[1]}",)) as driver:
        driver.set_window_size(*PHONE)
        yield driver


@pytest.fixture(scope="module")
def linked(stack: Stack, phone: WebDriver) -> Iterator[Site]:
    """The real stack, its links on the API's own address."""
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-links.log")
    server.start(PARKWAY_IMPORTS=IMPORTS, PARKWAY_PUBLIC_URL=server.url)
    stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
    try:
        with server.client() as http:
            yield Site(server=server, http=http, actors=make_actors(http), browser=phone)
    finally:
        phone.get("about:blank")
        server.stop()


def test_link_page__fits_a_390_px_screen_and_its_approve_decides_as_the_link_s_person(
    linked: Site, tmp_path: Path
) -> None:
    # Given a waiting run and a link to it for the human, opened on a phone
    site = linked
    run_id = site.start("teams.approve", {"target": TARGET, "justify": True})
    iid = site.wait_pending(run_id)["deploy"]
    made = site.http.post(f"/v1/interactions/{iid}/links", json={"principal": HUMAN}, headers=site.actors.auth(ADMIN))
    assert made.status_code == 201, made.text
    url = made.json()["url"]
    assert url.startswith(f"{site.server.url}/links/pl_")
    site.browser.get(url)

    # Then the page fits the width: nothing scrolls sideways, the prompt, the field and both choices are in view
    width = site.browser.execute_script("return window.innerWidth")
    assert width == PHONE[0], width
    assert site.browser.execute_script("return document.documentElement.scrollWidth") <= width
    assert site.css("#prompt").text == "Allow deploy on prod?" and site.css("#person").text == HUMAN
    for selector in ("#justification", "button.approve", "button.reject"):
        box = site.css(selector).rect
        assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["width"] > 100, (selector, box)
    shot = tmp_path / "approval-link-390.png"
    assert site.browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)
    print(f"screenshot: {shot} (and {ARTIFACTS / shot.name})")
    assert not site.console_errors()

    # When the human says why and approves
    site.css("#justification").send_keys("checked the diff on my phone")
    site.submit(site.css("button.approve"))

    # Then it is decided as them, once, and the run resumes
    assert site.css("#notice").text.startswith("Approved: Allow deploy on prod?"), site.css("#notice").text
    assert "answered" in site.css("#receipt").text
    assert wait_status(run_id, "completed").result["answered_by"] == HUMAN
    assert site.browser.execute_script("return document.documentElement.scrollWidth") <= width
    assert not site.console_errors()
    # And the API's access log shows the link's path, never its token (a bearer secret)
    token = url.rsplit("/", 1)[1]
    logged = site.server.text()
    assert "/links/pl_…" in logged and token not in logged
