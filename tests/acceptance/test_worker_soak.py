"""A soak of the HTTP worker protocol (issue 33) in the acceptance style: runs parked from outside, two people
answering each at once, remote agents (tests/acceptance/soak_agent.py, real processes) SIGKILLed at random
while they hold leases and journal a ``never`` tool call. Nothing is lost, nothing commits twice, and no
effect runs twice."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from models.fleet_tables import LeaseReceipt
from models.tables import ToolCall
from parkway.db import transaction
from tests.api.conftest import ApiServer, make_admin
from tests.support import ROOT, TARGET, Stack, child_env, event_types, run_row, wait_for

KEY = "soak.decide@1"
RUNS = 30
AGENTS = 3
CHOICE = {"kind": "question", "key": "choice", "prompt": "Which?", "target": TARGET,
          "schema": {"type": "string", "enum": ["ana", "bo"]}}  # fmt: skip


class Fleet:
    """Agent processes, killed with SIGKILL at random and replaced."""

    def __init__(self, url: str, token: str, effects: Path, database_url: str, logs: Path) -> None:
        self.cmd = [sys.executable, "-m", "tests.acceptance.soak_agent", url, token, str(effects)]
        self.env = child_env(database_url)
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def start_one(self) -> None:
        with open(self.logs / f"soak-agent-{len(self.procs) + self.kills}.log", "ab") as out:
            self.procs.append(subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT))

    def kill_one(self) -> None:
        victim = self.procs.pop(random.randrange(len(self.procs)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.kills += 1
        self.start_one()

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def api(stack: Stack) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-soak.log").start()
    try:
        with server.client() as http:
            tokens = {"admin": make_admin("soak-admin")}
            admin = {"Authorization": f"Bearer {tokens['admin']}"}
            for who in ("agent", "ana", "bo", "worker"):
                kind = {"ana": "human", "bo": "human"}.get(who, who)
                made = http.post("/v1/principals", json={"kind": kind, "name": f"soak-{who}"}, headers=admin)
                assert made.status_code == 201, made.text
                tokens[who] = made.json()["token"]
                granted = http.post("/v1/grants", json={"principal": f"soak-{who}", "target": TARGET}, headers=admin)
                assert granted.status_code == 201, granted.text  # the worker too: it leases only granted runs
            yield http, tokens
    finally:
        server.stop()


def test_soak__agents_killed_at_random_answers_racing__nothing_lost_nothing_twice(
    stack: Stack, api: tuple[httpx.Client, dict[str, str]], tmp_path: Path
) -> None:
    http, tokens = api

    def call(who: str, path: str, body: Any, **headers: str) -> httpx.Response:
        return http.post(path, json=body, headers={"Authorization": f"Bearer {tokens[who]}", **headers})

    # Given remote agents serving the continuation (the first lease call advertises it), and runs parked on it
    effects = tmp_path / "effects"
    effects.touch()
    fleet = Fleet(str(http.base_url), tokens["worker"], effects, stack.database_url, stack.logs)
    for _ in range(AGENTS):
        fleet.start_one()
    try:
        assert call("worker", "/v1/worker/lease", {"worker": "soak-test", "serves": [KEY], "max": 0}).status_code == 200
        run_ids = []
        for _ in range(RUNS):
            body = {"workflow": "soak.outside", "payload": {}, "target": TARGET,
                    "park": {"continuation": KEY, "snapshot": {}, "interactions": [CHOICE]}}  # fmt: skip
            made = call("agent", "/v1/runs", body, **{"Idempotency-Key": uuid.uuid4().hex})
            assert made.status_code == 201, made.text
            run_ids.append(made.json()["id"])

        # When two people answer every question at once, while agents are SIGKILLed at random moments
        stop = threading.Event()

        def killer() -> None:
            while not stop.wait(random.uniform(0.3, 1.0)):
                fleet.kill_one()

        def race(run: dict[str, Any]) -> list[int]:
            iid = run["interactions"][0]["id"]
            with ThreadPoolExecutor(2) as pool:
                path = f"/v1/interactions/{iid}/answer"
                answers = [pool.submit(call, who, path, {"response_id": uuid.uuid4().hex, "value": who})
                           for who in ("ana", "bo")]  # fmt: skip
                return sorted(a.result().status_code for a in answers)

        killing = threading.Thread(target=killer, daemon=True)
        killing.start()
        try:
            runs = [http.get(f"/v1/runs/{r}", headers={"Authorization": f"Bearer {tokens['ana']}"}).json()
                    for r in run_ids]  # fmt: skip
            codes = [race(run) for run in runs]
            wait_for(lambda: all(run_row(r).status == "completed" for r in run_ids), sweep=True, timeout=240,
                     what="every run completed")  # fmt: skip
        finally:
            stop.set()
            killing.join()
    finally:
        fleet.stop()

    # Then each question had one winner and one 409, and every run completed exactly once, with one receipt
    assert codes == [[200, 409]] * RUNS
    with transaction() as session:
        receipts = Counter(session.scalars(select(LeaseReceipt.run_id).where(LeaseReceipt.run_id.in_(run_ids))))
        calls = {c.run_id: c for c in session.scalars(select(ToolCall).where(ToolCall.run_id.in_(run_ids)))}
    assert receipts == Counter({r: 1 for r in run_ids})
    assert all(event_types(r).count("run.completed") == 1 for r in run_ids)
    # And the never tool's effect ran at most once per run; where it may have run unrecorded, it says so
    ran = Counter(effects.read_text().split())
    assert max(ran.values(), default=0) == 1, ran.most_common(3)
    for run_id in run_ids:
        result = run_row(run_id).result
        assert result["answer"] in ("ana", "bo")
        assert ran[run_id] == 1 or result["notify"] == "possibly ran", (run_id, result, calls[run_id].phase)
    print(f"\nsoak: {RUNS} runs, {fleet.kills} agents SIGKILLed, effects run {sum(ran.values())}, "
          f"possibly ran {sum(1 for r in run_ids if run_row(r).result['notify'] == 'possibly ran')}")  # fmt: skip
