"""The TypeScript client (clients/typescript) against a real stack: uvicorn, a Celery worker and beat, and
this module's PostgreSQL database. Its tests run with Node's test runner (``node --test``) on the compiled
package (``make test`` builds it from the committed lock file: Makefile, TS_BUILT), with the API's URL and
the tokens of an agent, a person and a worker in the environment; this test asserts on their exit code and
their summary. Leases are 5 s there, the shortest the protocol takes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.conftest import remote_principals
from tests.api.conftest import ApiServer
from tests.support import ROOT, TARGET, Stack

CLIENT = ROOT / "clients" / "typescript"
NODE_TESTS = (
    "test/signature.test.js",
    "test/push.test.js",
    "test/client.test.js",
    "test/stack.e2e.js",
    "test/faults.e2e.js",
)
AGENT, HUMAN, WORKER, ADMIN = "ts-agent", "ts-ana", "ts-worker", "ts-root"


def build() -> Path:
    """The compiled package and tests, made (again) when missing or stale: ``make`` decides."""
    done = subprocess.run(["make", "-s", "clients/typescript/.built"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, f"building the TypeScript client failed:\n{done.stdout}\n{done.stderr}"
    return CLIENT / "build-test"


@pytest.mark.timeout(480)
def test_typescript_client__its_node_tests_pass_against_a_real_stack(stack: Stack) -> None:
    compiled = build()
    # A remote worker is live 4 s after each lease call (60 s by default): a test sees a busy one advertise.
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-ts.log")
    server.start(PARKWAY_REMOTE_WORKER_TTL_S="4")
    try:
        stack.start_worker()
        stack.start_beat()
        with server.client() as http:
            made = remote_principals(http, admin=ADMIN, agent=AGENT, human=HUMAN, worker=WORKER)
        env = {
            **os.environ,
            "PARKWAY_URL": server.url,
            "PARKWAY_TARGET": TARGET,
            "PARKWAY_AGENT_TOKEN": made[AGENT],
            "PARKWAY_HUMAN_TOKEN": made[HUMAN],
            "PARKWAY_HUMAN_NAME": HUMAN,
            "PARKWAY_WORKER_TOKEN": made[WORKER],
            "PARKWAY_ADMIN_TOKEN": made[ADMIN],
        }
        try:
            ran = subprocess.run(
                ["node", "--test", "--test-reporter=tap", *NODE_TESTS], cwd=compiled, env=env, capture_output=True,
                text=True, timeout=400,
            )  # fmt: skip
        except subprocess.TimeoutExpired as hung:
            raise AssertionError(f"node --test did not finish:\n{hung.stdout!r}\n{hung.stderr!r}") from None
    finally:
        server.stop()
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, f"node --test: {ran.returncode}\n{output}\n--- uvicorn:\n{server.text()[-3000:]}"
    summary = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", output, re.M))
    assert summary.get("fail") == "0" and summary.get("pass") == summary.get("tests"), output
    assert int(summary["pass"]) >= 31, output
