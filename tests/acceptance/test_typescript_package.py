"""The TypeScript client as someone outside this repository gets it (clients/typescript/README.md, "Install"):
the tarball ``make ts-pack`` packs, installed with ``npm install`` into an empty project outside the checkout,
offline (it has no runtime dependency). Plain Node loads it with ``import`` and with ``require``; tsc compiles
the README's agent there against the installed types, and plain Node runs it against a real uvicorn on this
module's database until its run completes. No Celery worker: the agent serves its own continuation."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from api.app import app
from tests.acceptance.conftest import remote_principals
from tests.api.conftest import ApiServer
from tests.support import ROOT, TARGET, Stack, Worker, wait_for

CLIENT = ROOT / "clients" / "typescript"
PACKAGE = json.loads((CLIENT / "package.json").read_text())
AGENT, HUMAN, WORKER, ADMIN = "tspkg-agent", "tspkg-ana", "tspkg-worker", "tspkg-root"

# A CommonJS consumer: tsc checks it against the types of the `require` condition, plain Node runs it.
REQUIRED = """import { Parkway, complete } from "@parkway/client";
const client: Parkway = new Parkway({ url: "http://127.0.0.1:1", token: "unused" });
console.log(typeof client.getRun, complete({ ok: true }).type);
"""
# The README's tsc line (clients/typescript/README.md, "The example"); @types/node is the checkout's, whose
# own declarations are not this test's to check.
TSC = [str(CLIENT / "node_modules" / ".bin" / "tsc"), "--module", "nodenext", "--target", "es2022", "--types", "node",
       "--typeRoots", str(CLIENT / "node_modules" / "@types"), "--strict", "--skipLibCheck"]  # fmt: skip


def run(args: list[str], cwd: Path, timeout: float = 120) -> str:
    """``args`` run in ``cwd``; their stdout, or the assertion error with both outputs."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty npm project outside the checkout, the tarball installed in it, the README's agent compiled
    there (by the checkout's tsc: the project installs nothing but the tarball)."""
    with open(CLIENT / "package.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one make here at a time: this module's other xdist workers wait
        run(["make", "-s", "ts-pack"], ROOT, timeout=300)
    tarball = CLIENT / f"parkway-client-{PACKAGE['version']}.tgz"
    project = tmp_path_factory.mktemp("ts-project").resolve()
    assert not project.is_relative_to(ROOT)
    run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--cache", str(project / ".npm"), str(tarball)],
        project)  # fmt: skip
    shutil.copy(CLIENT / "examples" / "park-and-resume.ts", project / "park-and-resume.mts")
    run([*TSC, "park-and-resume.mts"], project)
    return project


def test_typescript_package__its_version_is_the_apis() -> None:
    assert PACKAGE["version"] == app.version  # the API's version: its OpenAPI's info.version
    readme = (CLIENT / "README.md").read_text()
    assert f"parkway-client-{app.version}.tgz" in readme, "clients/typescript/README.md installs another version"


def test_typescript_package__installed_from_its_tarball__plain_node_imports_and_requires_it(project: Path) -> None:
    names = "Object.keys(client).sort().join()"
    imported = run(["node", "--input-type=module", "-e", f'const client = await import("@parkway/client"); '
                    f'console.log(import.meta.resolve("@parkway/client")); console.log({names})'], project)  # fmt: skip
    required = run(["node", "-e", f'const client = require("@parkway/client"); '
                    f'console.log(require.resolve("@parkway/client")); console.log({names})'], project)  # fmt: skip

    esm, esm_names = imported.split()
    cjs, cjs_names = required.split()
    assert esm.endswith("/node_modules/@parkway/client/dist/esm/index.js"), imported
    assert cjs.endswith("/node_modules/@parkway/client/dist/cjs/index.js"), required
    assert esm_names == cjs_names and {"Parkway", "worker", "pushHandler"} <= set(esm_names.split(",")), (
        imported + required
    )
    (project / "required.cts").write_text(REQUIRED)
    run([*TSC, "required.cts"], project)
    assert run(["node", "required.cjs"], project).split() == ["function", "complete"]
    # Nothing but the package itself was installed: it has no runtime dependency.
    assert "dependencies" not in PACKAGE
    assert sorted(p.name for p in (project / "node_modules").iterdir()) == [".package-lock.json", "@parkway"]


def test_typescript_package__the_readmes_agent_with_plain_node__prints_its_runs_outcome(
    stack: Stack, project: Path
) -> None:
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-tspkg.log").start()
    try:
        with server.client() as http:
            tokens = remote_principals(http, admin=ADMIN, agent=AGENT, human=HUMAN, worker=WORKER)
            admin, human = ({"Authorization": f"Bearer {tokens[name]}"} for name in (ADMIN, HUMAN))
            # A worker leases only what runs on a target it is granted (an agent parks only on one).
            granted = http.post("/v1/grants", json={"principal": WORKER, "target": TARGET}, headers=admin)
            assert granted.status_code == 201, granted.text

            agent = start_agent(stack, project, server.url, agent=tokens[AGENT], worker=tokens[WORKER])
            run_id = wait_for(lambda: waiting(agent), timeout=30, what="the agent's run waiting")
            pending = http.get("/v1/interactions", params={"run_id": run_id, "status": "pending"}, headers=human)
            (question,) = pending.json()["items"]
            assert question["prompt"] == "Priority of ticket 4711?"
            answered = http.post(f"/v1/interactions/{question['id']}/answer", headers=human,
                                 json={"response_id": uuid.uuid4().hex, "value": "high"})  # fmt: skip
            assert answered.status_code == 200, answered.text

            # Its continuation completes the run; it prints the outcome and stops serving: the process ends.
            try:
                exit_code = agent.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the agent did not end with its run:\n{agent.text()}") from None
    finally:
        server.stop()
    assert exit_code == 0, agent.text()
    assert agent.text().splitlines() == [
        f"run {run_id} is waiting",
        f'run {run_id} is completed: {{"ticket":4711,"priority":"high","by":"{HUMAN}"}}',
    ]


def start_agent(stack: Stack, project: Path, url: str, *, agent: str, worker: str) -> Worker:
    """``node park-and-resume.mjs`` in the project, its output (both streams) in the module's logs."""
    log = stack.logs / "park-and-resume.log"
    env = {**os.environ, "PARKWAY_URL": url, "AGENT_TOKEN": agent, "WORKER_TOKEN": worker}
    with open(log, "wb") as out:
        proc = subprocess.Popen(["node", "park-and-resume.mjs"], cwd=project, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    process = Worker(proc=proc, log=log, name="park-and-resume")
    stack.workers.append(process)  # killed by stack.stop_all() if the test fails with it running
    return process


def waiting(agent: Worker) -> str | None:
    """The id of the agent's run once it printed that it waits; an agent that exited first fails the test."""
    found = re.search(r"^run (\S+) is waiting$", agent.text(), re.M)
    assert found or agent.alive(), f"the agent exited with {agent.proc.returncode}:\n{agent.text()}"
    return found.group(1) if found else None
