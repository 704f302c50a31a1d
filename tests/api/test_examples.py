"""The shipped example workflows (``examples/``), each run to completion through the HTTP API by a real
worker that loads them the way ``make run`` does: by the default ``PARKWAY_IMPORTS``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import examples  # noqa: F401  (registered here too: this process's sweep must know their continuations)
from parkway.cli_bootstrap import EXAMPLE_TARGET
from parkway.settings import Settings, get_settings
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, ApiServer, make_actors
from tests.support import Stack, wait_for


@dataclass
class Caller:
    """The API over HTTP, with the fixture's principals (an agent starts, a human answers)."""

    http: httpx.Client
    actors: Actors

    def start(self, workflow: str, payload: dict[str, Any]) -> str:
        body = {"workflow": workflow, "payload": payload, "target": EXAMPLE_TARGET}
        made = self.http.post("/v1/runs", json=body, headers=self.actors.auth(AGENT))
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def get(self, path: str) -> Any:
        response = self.http.get(path, headers=self.actors.auth(HUMAN))
        assert response.status_code == 200, response.text
        return response.json()

    def asked(self, run_id: str, count: int) -> dict[str, dict[str, Any]]:
        def found() -> dict[str, dict[str, Any]]:
            open_ = {i["key"]: i for i in self.get(f"/v1/runs/{run_id}")["interactions"]}
            return open_ if len(open_) == count else {}

        return wait_for(found, timeout=60, sweep=True, what=f"run {run_id} to ask {count} question(s)")

    def answer(self, interaction_id: str, value: Any) -> None:
        body = {"response_id": uuid.uuid4().hex, "value": value}
        response = self.http.post(
            f"/v1/interactions/{interaction_id}/answer", json=body, headers=self.actors.auth(HUMAN)
        )
        assert response.status_code == 200, response.text

    def finished(self, run_id: str) -> dict[str, Any]:
        return wait_for(
            lambda: (run := self.get(f"/v1/runs/{run_id}"))["status"] not in ("running", "waiting") and run,
            timeout=60,
            sweep=True,
            what=f"run {run_id} to finish",
        )


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[Caller]:
    """The API and a worker, both loading the examples by the default setting (PARKWAY_IMPORTS unset); the
    agent and the human granted on the examples' target, as ``parkway up`` grants its own."""
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-examples.log")
    server.start(PARKWAY_IMPORTS=None)
    stack.start_worker(PARKWAY_IMPORTS=None)
    try:
        with server.client() as http:
            actors = make_actors(http)
            for name in (AGENT, HUMAN):
                body = {"principal": name, "target": EXAMPLE_TARGET}
                granted = http.post("/v1/grants", json=body, headers=actors.auth(ADMIN))
                assert granted.status_code == 201, granted.text
            yield Caller(http, actors)
    finally:
        server.stop()


def test_settings__the_examples_are_imported_when_parkway_imports_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARKWAY_IMPORTS")
    assert Settings().import_modules == ["examples"]
    monkeypatch.setenv("PARKWAY_IMPORTS", "mine.flows")
    assert Settings().import_modules == ["mine.flows"]


def test_deploy_example__approved_runs_its_never_tool_once_and_completes(
    api: Caller,
) -> None:
    # Given a deploy that asks for permission and a window
    run_id = api.start("deploy.plan", {"service": "api"})
    asked = api.asked(run_id, 2)
    assert asked["shell"]["kind"] == "permission" and asked["shell"]["resources"] == ["deploy api"]
    assert asked["window"]["schema"]["enum"] == ["now", "tonight"] and asked["window"]["expires_at"]

    # When a person approves it and picks the window
    api.answer(asked["shell"]["id"], {"approved": True})
    api.answer(asked["window"]["id"], "tonight")

    # Then the run completes, its tool ran once, journaled as never-replayed, appending to the workspace
    run = api.finished(run_id)
    assert run["status"] == "completed", run
    assert "deploy api" in run["result"]["output"]
    [call] = run["tool_calls"]
    assert (call["name"], call["replay"], call["phase"], call["possibly_ran"]) == ("shell", "never", "settled", False)
    log = get_settings().workspace / run_id / "deploy.log"
    assert log.read_text() == "deploy api (tonight)\n"


def test_deploy_example__rejected_skips_the_deploy(api: Caller) -> None:
    run_id = api.start("deploy.plan", {"service": "web"})
    asked = api.asked(run_id, 2)
    api.answer(asked["shell"]["id"], {"approved": False})
    api.answer(asked["window"]["id"], "now")
    run = api.finished(run_id)
    assert (run["status"], run["result"], run["tool_calls"]) == ("completed", {"skipped": True}, [])
    assert not (get_settings().workspace / run_id / "deploy.log").exists()


def test_signin_example__the_sensitive_code_reaches_its_continuation_only(
    api: Caller,
) -> None:
    run_id = api.start("signin.ask", {"site": "shop.example"})
    [question] = api.asked(run_id, 1).values()
    assert question["sensitive"] == ["otp"]
    api.answer(question["id"], {"user": "ana", "otp": "204613"})
    run = api.finished(run_id)
    assert (run["status"], run["result"]) == ("completed", {"site": "shop.example", "user": "ana", "code_digits": 6})
    read = api.get(f"/v1/interactions/{question['id']}")
    assert read["value"] == {"user": "ana", "otp": "***"}
    assert "204613" not in json.dumps(api.get(f"/v1/runs/{run_id}/events"))


def test_deploy_example__a_payload_without_service_is_refused_at_the_door(api: Caller) -> None:
    def plans() -> int:
        page = api.http.get(
            "/v1/runs", params={"workflow": "deploy.plan", "limit": 200}, headers=api.actors.auth(AGENT)
        )
        return len(page.json()["items"])

    before = plans()
    # The case: it was 201, then the run failed with KeyError: 'service'
    body = {"workflow": "deploy.plan", "payload": {"servce": "api"}, "target": EXAMPLE_TARGET}
    refused = api.http.post("/v1/runs", json=body, headers=api.actors.auth(AGENT))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "invalid_payload"
    assert refused.json()["problems"] == [{"loc": ["payload", "service"], "msg": "Field required", "type": "missing"}]
    assert plans() == before  # no run was made
