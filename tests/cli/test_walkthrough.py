"""The README's walkthrough, run step by step as a newcomer follows it (issue 19, item 8 and "Done when").

A real ``parkway up`` on the embedded defaults in a fresh ``PARKWAY_HOME`` (``make run`` on free ports);
the tokens and URLs read from what it prints; the README's own shell blocks run in one bash, in order,
their output compared with what the README shows; the first run answered on the Decisions page in a
headless Chromium, and its history page screenshotted to
$PARKWAY_TEST_ARTIFACTS/run-history-walkthrough.png (var/artifacts). Then, in the same terminal on the same
stack, every block of the docs that runs after the walkthrough, in reader order (tests/docs/reading.py): the
webhook receiver, the teams' release, the TypeScript package's agent, the Go worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.api.conftest import Actors, ApiServer
from tests.cli.support import Up, child_pids, start_up
from tests.cli.walkthrough import (
    README_API,
    README_FLOWER,
    README_HOME,
    README_WORKSPACES,
    TOKEN_LINE,
    Shell,
    Step,
    assert_prints,
    steps,
)
from tests.docs import reading
from tests.pages import conftest as pages
from tests.pages.browsing import Site, sign_in
from tests.support import ROOT, wait_for

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.timeout(600)  # a whole stack's start, three runs and a browser on a loaded machine

WAIT_S = 90
browser = pages.browser  # the suite's headless Chromium, as this module's fixture


class MakeRun:
    """``make run``, on free ports: ``parkway up`` with nothing configured (the examples loaded by default), in
    a home with nothing in it yet, as a newcomer's first start is; stopped (Ctrl-C) and started again with
    settings when a block of the docs says so."""

    def __init__(self, tmp_path: Path, home: Path) -> None:
        self.tmp_path, self.home, self.starts = tmp_path, home, 0
        self.up: Up | None = None

    def start(self, settings: dict[str, str]) -> Up:
        self.starts += 1
        self.up = up = start_up(self.tmp_path, self.home, name=f"up-{self.starts}", imports=None, extra_env=settings)
        wait_for(lambda: up.printed("run history  "), timeout=180, what="parkway up to print its URLs")
        up.groups = list(child_pids(up.stdout()).values())
        return up

    def stop(self) -> None:
        if self.up is not None:
            self.up.stop()


@pytest.fixture
def make_run(tmp_path: Path, empty_home: Path) -> Iterator[MakeRun]:
    running = MakeRun(tmp_path, empty_home)
    try:
        running.start({})
        yield running
    finally:
        running.stop()


def printed(pattern: str, text: str) -> str:
    found = re.search(pattern, text, re.MULTILINE)
    assert found is not None, f"{pattern!r} not printed:\n{text}"
    return found.group(1)


def test_readme_walkthrough__make_run_start_answer_on_the_page_and_by_curl_then_the_history__then_the_docs(
    make_run: MakeRun, tmp_path: Path, browser: WebDriver
) -> None:
    up = make_run.up
    assert up is not None
    walk = steps()
    assert sorted(walk) == list(range(1, len(walk) + 1)) and len(walk) >= 6, "steps 1, 2, … in order"
    out = up.stdout()

    # 1. Start: `make run` is `parkway up`, and it printed the tokens and the URLs the README shows
    [start] = walk[1].commands
    assert start.script.strip() == "make run"
    assert re.search(r"^run:.*\n\t\$\(VENV\)/bin/parkway up$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert start.shown is not None
    home = str(up.home.resolve())
    as_in_readme = out.replace(up.api, README_API).replace(up.flower, README_FLOWER).replace(home, README_HOME)
    assert_prints(start.shown, as_in_readme)
    tokens = dict(re.findall(r"^parkway up:\s+(admin|agent|human)\s+(pk_\S+)", out, re.MULTILINE))
    assert set(tokens) == {"admin", "agent", "human"}, out
    decisions = printed(r"^parkway up: Decisions\s+(\S+)$", out)

    # The terminal of steps 2 to 6 and of the docs after them: a checkout (this one's .venv, Makefile and
    # clients; a copy of examples/go, where the Go README builds), the same environment
    checkout = reading.checkout(tmp_path / "parkway")
    # The README's home is ./var (nothing configured); this stack's is up.home: the same paths under it
    where = {README_API: up.api, README_WORKSPACES: str(up.home / "workspaces")}
    shell = Shell(checkout, reading.terminal(tmp_path, PARKWAY_HOME=up.env["PARKWAY_HOME"]), where)
    try:
        walk_on(walk, shell, up, tokens, decisions, browser)
        # Past the walkthrough: the blocks of every doc that run in its terminal, in reader order
        reading.read_on(shell, make_run, tokens)
    finally:
        shell.close()


def walk_on(
    walk: dict[int, Step], shell: Shell, up: Up, tokens: dict[str, str], decisions: str, browser: WebDriver
) -> None:
    # 2. The tokens: pasted where the README says pk_...
    [paste] = walk[2].commands
    pasted = {name.lower() for name in TOKEN_LINE.findall(paste.script)}
    assert pasted == {"agent", "human"}, paste.script
    shell.run(TOKEN_LINE.sub(lambda m: f"{m.group(1)}_TOKEN={tokens[m.group(1).lower()]}", paste.script))

    # 3. Start a run: the CLI's and curl's
    run_each(shell, walk[3])
    first, second = shell.value("RUN"), shell.value("RUN2")
    human = {"Authorization": f"Bearer {tokens['human']}"}
    with httpx.Client(base_url=up.api, headers=human, timeout=30) as http:

        def run(run_id: str) -> dict[str, Any]:
            response = http.get(f"/v1/runs/{run_id}")
            assert response.status_code == 200, response.text
            found: dict[str, Any] = response.json()
            return found

        # (a person reads on while the worker parks both runs)
        for parked in (first, second):
            wait_for(lambda r=parked: len(run(r)["interactions"]) == 2, timeout=WAIT_S, what=f"run {parked} to ask")

        # 4. Answer the first run on the Decisions page, signed in with the human's token
        site = Site(  # the pages' browser helpers, on this stack's API (never started or stopped from here)
            server=ApiServer(database_url="", log=Path("/dev/null"), port=int(up.api.rsplit(":", 1)[1])),
            http=http,
            actors=Actors(tokens={"human": tokens["human"]}),
            browser=browser,
        )
        assert decisions == f"{up.api}/decisions"
        answer_on_the_page(site, walk[4].text, first)
        wait_for(lambda: run(first)["status"] == "completed", timeout=WAIT_S, what="the page's run to complete")

        # 5. The second run answered by curl: a retry gets the same receipt, a different answer 409
        receipts = [line for line in run_each(shell, walk[5]).splitlines() if line.startswith('{"status":"answered"')]
        by_response: dict[str, set[str]] = {}
        for receipt in receipts:
            by_response.setdefault(json.loads(receipt)["response_id"], set()).add(receipt)
        assert len(receipts) > len(by_response), "the README shows a retry"
        assert all(len(same) == 1 for same in by_response.values()), f"a retry gets the same receipt: {receipts}"
        assert all(i["status"] == "answered" for i in run(second)["interactions"])

        # 6. It completes; its history page
        wait_for(lambda: run(second)["status"] == "completed", timeout=WAIT_S, what="the curl run to complete")
        printed_urls = run_each(shell, walk[6])
        assert f"{README_API}/runs/{first}" in printed_urls  # (as the README shows it)
        see_the_history(site, f"{up.api}/runs/{first}", first, run(first))


def run_each(shell: Shell, step: Step) -> str:
    """Every command of a step, in order, each one's output as the README shows it (this stack's URLs and paths
    put back as the README's); all they printed."""
    everything = []
    for command in step.commands:
        output = shell.run(command.script)
        for readme, actual in shell.replace.items():
            output = output.replace(actual, readme)
        if command.shown is not None:
            assert_prints(command.shown, output)
        everything.append(output)
    return "\n".join(everything)


def answer_on_the_page(site: Site, told: str, run_id: str) -> None:
    """What step 4 tells a person to do, done in the browser."""
    from selenium.webdriver.support.ui import Select

    assert "**Approve**" in told and "**Answer**" in told and "`tonight`" in told and "**Sign in**" in told
    sign_in(site, "human")
    card = f'#run-cards article[data-run-of="{run_id}"]'
    site.wait(lambda _: len(site.all(f"{card} .prompt")) == 2, "the run's card with its two prompts")
    assert "Allow shell.exec on deploy api?" in site.css(card).text and "When?" in site.css(card).text
    site.submit(site.css(f"{card} button.approve"))
    assert site.css("#notice").text.startswith("Approved: Allow shell.exec on deploy api?")
    Select(site.css(f"{card} select[name='value']")).select_by_visible_text("tonight")
    site.submit(site.css(f"{card} form.answer button[type=submit]"))
    assert site.css("#notice").text.startswith("Answered “When?”")
    site.wait_live()
    site.wait(lambda _: site.css(f'#notice [data-run="{run_id}"]').text == "completed", "the run to show completed")
    assert site.console_errors() == []


def see_the_history(site: Site, url: str, run_id: str, run: dict[str, Any]) -> None:
    """Step 6's page: the completed run, its whole timeline in order, who answered; then the screenshot."""
    site.browser.get(url)
    site.wait_live()
    assert site.css(f'#summary [data-run="{run_id}"]').text == "completed"
    events = site.http.get(f"/v1/runs/{run_id}/events").json()["items"]
    site.wait(lambda _: len(site.all("#timeline li[data-seq]")) == len(events), "the whole timeline")
    seen = [row.get_attribute("data-type") for row in site.all("#timeline li[data-seq]")]
    assert seen == [e["type"] for e in events]
    assert seen[0] == "run.created" and seen[-1] == "run.completed"
    for kind in ("interaction.answered", "toolcall.settled"):
        assert kind in seen
    assert site.css("#interactions").text.count("by human at") == 2
    assert run["result"]["output"].startswith("ran 'deploy api' (tonight)")
    assert "ran 'deploy api' (tonight)" in site.css("main").text
    assert site.console_errors() == []
    site.screenshot("run-history-walkthrough.png")
