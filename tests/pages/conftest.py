"""Decisions page fixtures: an in-process TestClient, and a headless Chromium driven by Selenium.

The browser is Debian's ``chromium`` + ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``;
override with ``PARKWAY_CHROMIUM`` / ``PARKWAY_CHROMEDRIVER``), started by the test with a fresh profile.
Without them the browser tests skip, or fail when ``PARKWAY_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

import tests.pages.flows  # noqa: F401  (registers the page tests' workflows in this process)
from tests.api.conftest import AGENT, Actors, ApiServer, drive, make_actors
from tests.pages.browsing import Site
from tests.pages.flows import IMPORTS
from tests.support import TARGET, Stack

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path(os.environ.get("PARKWAY_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("PARKWAY_CHROMEDRIVER", "/usr/bin/chromedriver"))
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1400",
)


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[TestClient]:
    from api.app import app

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def actors(client: TestClient) -> Actors:
    return make_actors(client)


def start_driven(client: TestClient, actors: Actors, workflow: str, payload: dict[str, Any]) -> str:
    """A run started over HTTP by the agent, its ready continuations run in this process (as a worker would)."""
    made = client.post(
        "/v1/runs", json={"workflow": workflow, "payload": payload, "target": TARGET}, headers=actors.auth(AGENT)
    )
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    drive(run_id)
    return run_id


def browser_problem() -> str | None:
    """Why a headless Chromium cannot be driven here, or ``None``."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@contextmanager
def chromium(
    profile: Path, *, logs: dict[str, str], flags: tuple[str, ...] = (), page_load_timeout_s: float = 30
) -> Iterator[WebDriver]:
    """A headless Chromium on a fresh ``profile`` (removed after), its ``logs`` kinds kept; fails on CI and
    skips elsewhere when there is none."""
    problem = browser_problem()
    if problem:
        if os.environ.get("PARKWAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"the browser tests need a headless Chromium: {problem}")
        pytest.skip(f"no headless Chromium: {problem}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", logs)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags):
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(profile.parent / f"{profile.name}.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(page_load_timeout_s)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile, quit at the end of the module (console errors and CSP
    violations logged)."""
    with chromium(tmp_path_factory.mktemp("chromium-profile"), logs={"browser": "ALL"}) as driver:
        yield driver


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


# --------------------------------------------------------------------------- reading the page's forms


class Forms(HTMLParser):
    """Every form of a page: its action and its named inputs' values (hidden ones included)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.forms: dict[str, dict[str, str]] = {}
        self._action: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values: dict[str, Any] = dict(attrs)
        if tag == "form":
            self._action = values.get("action")
            self.forms.setdefault(self._action or "", {})
        elif tag == "input" and self._action is not None and values.get("name"):
            self.forms[self._action][values["name"]] = values.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._action = None
