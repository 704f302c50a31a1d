"""/docs (Swagger UI) and /redoc render their operation lists in a headless Chromium that cannot reach
anything but this machine: their assets are served by the API itself, and no request leaves localhost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from tests.api.conftest import ApiServer
from tests.pages.conftest import chromium

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

LOCAL_HOSTS = {"127.0.0.1", "localhost"}


@pytest.fixture(scope="module")
def offline_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """Headless Chromium whose host resolver knows 127.0.0.1 only, logging every request it makes."""
    with chromium(
        tmp_path_factory.mktemp("chromium-docs"),
        logs={"performance": "ALL", "browser": "ALL"},
        flags=("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",),
        page_load_timeout_s=60,
    ) as driver:
        yield driver


def requested_urls(driver: WebDriver) -> list[str]:
    """Every URL the page sent a request to since the last call (Chrome's performance log); a request the
    page's CSP blocked never left the browser and is not counted."""
    sent: dict[str, str] = {}
    blocked: set[str] = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            sent[params["requestId"]] = params["request"]["url"]
        elif message["method"] == "Network.loadingFailed" and params.get("blockedReason"):
            blocked.add(params["requestId"])
    return [url for request_id, url in sent.items() if request_id not in blocked]


def assert_only_local(urls: list[str]) -> None:
    network = [u for u in urls if urlsplit(u).scheme in ("http", "https", "ws", "wss")]
    outside = [u for u in network if urlsplit(u).hostname not in LOCAL_HOSTS]
    assert outside == [], f"requests left localhost: {outside}"
    assert network, "no request was logged at all"


def wait_for_elements(driver: WebDriver, css: str, count: int) -> list[object]:
    from selenium.webdriver.support.ui import WebDriverWait

    found: list[object] = WebDriverWait(driver, 60).until(
        lambda d: (els := d.find_elements("css selector", css)) and len(els) >= count and els
    )
    return found


def test_docs__swagger_ui_lists_the_operations_from_local_assets(server: ApiServer, offline_browser: WebDriver) -> None:
    offline_browser.get(f"{server.url}/docs")
    operations = wait_for_elements(offline_browser, ".opblock .opblock-summary-path", 10)
    paths = {el.text.replace("\u200b", "") for el in operations}  # type: ignore[attr-defined]
    assert {"/v1/runs", "/v1/interactions/{interaction_id}/answer", "/healthz"} <= paths, paths
    assert_only_local(requested_urls(offline_browser))


def test_redoc__lists_the_operations_from_local_assets(server: ApiServer, offline_browser: WebDriver) -> None:
    offline_browser.get(f"{server.url}/redoc")
    wait_for_elements(offline_browser, "[data-section-id^='operation/']", 10)
    ids = {
        el.get_attribute("data-section-id")
        for el in offline_browser.find_elements("css selector", "[data-section-id^='operation/']")
    }
    assert {"operation/start_run", "operation/answer_interaction"} <= ids, ids
    assert_only_local(requested_urls(offline_browser))
