"""The shipped example workflows (``examples/``), each run to completion through the HTTP API by a real
worker that loads them the way ``make run`` does: by the default ``PARKWAY_IMPORTS``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import examples  # noqa: F401  (registered here too: this process's sweep must know their continuations)
from parkway.settings import Settings, get_settings
from tests.api.conftest import AGENT, HUMAN, Actors, ApiServer, make_actors
from tests.support import ROOT, TARGET, Stack, Worker, wait_for


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-examples.log")
    server.start(PARKWAY_IMPORTS=None)  # unset: the default imports the examples
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def worker(stack: Stack) -> Worker:
    return stack.start_worker(PARKWAY_IMPORTS=None)


@pytest.fixture(scope="module")
def http(api: ApiServer) -> Iterator[httpx.Client]:
    with api.client() as client:
        yield client


@pytest.fixture(scope="module")
def actors(http: httpx.Client) -> Actors:
    return make_actors(http)


def start(http: httpx.Client, actors: Actors, workflow: str, payload: dict[str, Any]) -> str:
    made = http.post(
        "/v1/runs", json={"workflow": workflow, "payload": payload, "target": TARGET}, headers=actors.auth(AGENT)
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def read_run(http: httpx.Client, actors: Actors, run_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN))
    assert response.status_code == 200, response.text
    return dict(response.json())


def open_interactions(http: httpx.Client, actors: Actors, run_id: str, count: int) -> dict[str, dict[str, Any]]:
    def asked() -> dict[str, dict[str, Any]]:
        found = {i["key"]: i for i in read_run(http, actors, run_id)["interactions"]}
        return found if len(found) == count else {}

    return wait_for(asked, timeout=60, sweep=True, what=f"run {run_id} to ask {count} question(s)")


def answer(http: httpx.Client, actors: Actors, interaction_id: str, value: Any) -> None:
    body = {"response_id": uuid.uuid4().hex, "value": value}
    response = http.post(f"/v1/interactions/{interaction_id}/answer", json=body, headers=actors.auth(HUMAN))
    assert response.status_code == 200, response.text


def finished(http: httpx.Client, actors: Actors, run_id: str) -> dict[str, Any]:
    return wait_for(
        lambda: (run := read_run(http, actors, run_id))["status"] not in ("running", "waiting") and run,
        timeout=60,
        sweep=True,
        what=f"run {run_id} to finish",
    )


def test_settings__the_examples_are_imported_when_parkway_imports_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARKWAY_IMPORTS")
    assert Settings().import_modules == ["examples"]
    monkeypatch.setenv("PARKWAY_IMPORTS", "mine.flows")
    assert Settings().import_modules == ["mine.flows"]


def test_readme__its_workflow_is_examples_deploy_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A workflow") :]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert snippet is not None
    assert snippet.group(1) == (ROOT / "examples" / "deploy.py").read_text()


def test_deploy_example__approved_runs_its_never_tool_once_and_completes(
    http: httpx.Client, actors: Actors, worker: Worker
) -> None:
    # Given a deploy that asks for permission and a window
    run_id = start(http, actors, "deploy.plan", {"service": "api"})
    asked = open_interactions(http, actors, run_id, 2)
    assert asked["shell"]["kind"] == "permission" and asked["shell"]["resources"] == ["deploy api"]
    assert asked["window"]["schema"]["enum"] == ["now", "tonight"] and asked["window"]["expires_at"]

    # When a person approves it and picks the window
    answer(http, actors, asked["shell"]["id"], {"approved": True})
    answer(http, actors, asked["window"]["id"], "tonight")

    # Then the run completes, its tool ran once, journaled as never-replayed, appending to the workspace
    run = finished(http, actors, run_id)
    assert run["status"] == "completed", run
    assert "deploy api" in run["result"]["output"]
    [call] = run["tool_calls"]
    assert (call["name"], call["replay"], call["phase"], call["possibly_ran"]) == ("shell", "never", "settled", False)
    log = Path(get_settings().workspace_dir) / run_id / "deploy.log"
    assert log.read_text() == "deploy api (tonight)\n"


def test_deploy_example__rejected_skips_the_deploy(http: httpx.Client, actors: Actors, worker: Worker) -> None:
    run_id = start(http, actors, "deploy.plan", {"service": "web"})
    asked = open_interactions(http, actors, run_id, 2)
    answer(http, actors, asked["shell"]["id"], {"approved": False})
    answer(http, actors, asked["window"]["id"], "now")
    run = finished(http, actors, run_id)
    assert (run["status"], run["result"], run["tool_calls"]) == ("completed", {"skipped": True}, [])
    assert not (Path(get_settings().workspace_dir) / run_id / "deploy.log").exists()


def test_signin_example__the_sensitive_code_reaches_its_continuation_only(
    http: httpx.Client, actors: Actors, worker: Worker
) -> None:
    run_id = start(http, actors, "signin.ask", {"site": "shop.example"})
    [question] = open_interactions(http, actors, run_id, 1).values()
    assert question["sensitive"] == ["otp"]
    answer(http, actors, question["id"], {"user": "ana", "otp": "204613"})
    run = finished(http, actors, run_id)
    assert (run["status"], run["result"]) == ("completed", {"site": "shop.example", "user": "ana", "code_digits": 6})
    read = http.get(f"/v1/interactions/{question['id']}", headers=actors.auth(HUMAN)).json()
    assert read["value"] == {"user": "ana", "otp": "***"}
    assert "204613" not in http.get(f"/v1/runs/{run_id}/events", headers=actors.auth(HUMAN)).text
