"""``parkway up`` on the embedded defaults, as a user runs it (issue 7, item 1).

One real ``parkway up`` (API, worker, beat, Flower) in a fresh ``PARKWAY_HOME`` with nothing configured:
it prints its progress and each URL, answers ``/healthz``, processes a run end to end over HTTP, and on
SIGINT stops every child cleanly (exit 0, no process left).
"""

from __future__ import annotations

import re
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from parkway import embedded, valkey
from tests.cli.support import (
    Up,
    child_pids,
    embedded_env,
    free_port,
    group_alive,
    home_database,
    launch,
    parkway,
    start_up,
    stop,
)
from tests.support import wait_for
from tests.workflows import EFFECTS_DDL

TARGET = "team:ops"


@pytest.fixture
def up(tmp_path: Path, home: Path) -> Iterator[Up]:
    running = start_up(tmp_path, home)
    try:
        yield running
    finally:
        running.stop()


def test_up__embedded_defaults__serves_a_run_end_to_end_and_stops_cleanly_on_sigint(up: Up, tmp_path: Path) -> None:
    # Given `parkway up` with nothing configured
    wait_for(lambda: up.printed("all up in"), timeout=120, what="parkway up ready")
    stdout = up.stdout()
    pids = child_pids(stdout)
    up.groups = list(pids.values())
    assert set(pids) == {"broker", "api", "worker", "outbound", "beat", "flower"}, stdout
    assert "parkway up: starting broker (pid" in stdout
    for name in ("broker", "api", "worker", "outbound", "beat", "flower"):
        assert f"parkway up: {name} ready" in stdout
    assert f"api ready: {up.api}" in stdout
    postgres = embedded.postmaster(embedded.data_dir(up.home))
    assert postgres is not None, "up runs the embedded PostgreSQL of its home"
    assert f"embedded PostgreSQL ({embedded.data_dir(up.home)}) + {valkey.describe(up.home)}" in stdout, stdout
    assert valkey.problem(up.home) is None, "up runs the embedded Valkey of its home"
    assert not (up.home / "broker").exists(), "no filesystem broker where the embedded Valkey runs"
    assert not (tmp_path / "var").exists(), "./var must not be used when PARKWAY_HOME is set"

    # Then it answers /healthz, and Flower only with the credentials it printed once
    assert httpx.get(f"{up.api}/healthz", timeout=10).json() == {"status": "ok"}
    found = re.search(r"flower ready: (\S+)\s+\(user:password (\S+?):(\S+)\)", stdout)
    assert found is not None and found.group(1) == up.flower, stdout
    assert stdout.count(found.group(3)) == 1, "the generated Flower password is printed exactly once"
    assert httpx.get(f"{up.flower}/healthcheck", timeout=10).status_code == 200
    assert httpx.get(f"{up.flower}/api/workers", timeout=10).status_code == 401
    flower_auth = (found.group(2), found.group(3))
    assert httpx.get(f"{up.flower}/api/workers", auth=flower_auth, timeout=30).status_code == 200

    # And a second `parkway up` in the same home refuses at once, naming the first, which keeps serving
    again = parkway("up", "--port", str(free_port()), "--no-flower", env=up.env, cwd=tmp_path, timeout=60)
    assert again.returncode == 2, again.stdout + again.stderr
    assert f"another parkway up (pid {up.proc.pid}) is running in {up.home.resolve()}" in again.stderr, again.stderr
    assert "starting" not in again.stdout, again.stdout
    assert httpx.get(f"{up.api}/healthz", timeout=10).json() == {"status": "ok"}

    # (the table the test workflows record their committed effects in)
    with home_database(up.home) as db:
        db.execute(text(EFFECTS_DDL))

    # When an admin made with `parkway token create` sets up principals and grants over HTTP
    made = parkway("token", "create", "--kind", "admin", "--name", "root", env=up.env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    tokens = {"root": made.stdout.strip()}
    with httpx.Client(base_url=up.api, timeout=30) as http:

        def auth(name: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tokens[name]}"}

        for kind, name in (("agent", "bot"), ("human", "ana")):
            principal = http.post("/v1/principals", json={"kind": kind, "name": name}, headers=auth("root"))
            assert principal.status_code == 201, principal.text
            tokens[name] = principal.json()["token"]
            grant = http.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=auth("root"))
            assert grant.status_code == 201, grant.text

        # And an agent starts t.ask_one, which parks on one question
        body = {"workflow": "t.ask_one", "payload": {}, "target": TARGET}
        started = http.post("/v1/runs", json=body, headers=auth("bot"))
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]

        def status() -> str:
            response = http.get(f"/v1/runs/{run_id}", headers=auth("ana"))
            assert response.status_code == 200, response.text
            return str(response.json()["status"])

        wait_for(lambda: status() == "waiting", timeout=60, what="run waiting")
        pending = http.get("/v1/interactions", params={"status": "pending", "run_id": run_id}, headers=auth("ana"))
        [question] = pending.json()["items"]
        assert question["key"] == "go"

        # And a person answers it
        answered = http.post(
            f"/v1/interactions/{question['id']}/answer",
            json={"response_id": "r-1", "value": "ship"},
            headers=auth("ana"),
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["status"] == "answered"

        # Then the stack's worker resumes it to completion
        wait_for(lambda: status() == "completed", timeout=60, what="run completed")
        run = http.get(f"/v1/runs/{run_id}", headers=auth("ana")).json()
        assert run["result"] == {"go": "ship"}
        assert run["completed_at"] is not None
        # And its projection is in the home's workspaces, not in a ./var of the directory up was started in
        wait_for(lambda: (up.home / "workspaces" / run_id / "run_metadata.json").exists(), timeout=30,
                 what="the run's projection in the home")  # fmt: skip
        assert not (tmp_path / "var").exists()

        # And a second run is left waiting on its question
        second = http.post("/v1/runs", json=body, headers=auth("bot")).json()["id"]
        wait_for(lambda: http.get(f"/v1/runs/{second}", headers=auth("ana")).json()["status"] == "waiting",
                 timeout=60, what="second run waiting")  # fmt: skip

    # When parkway up gets SIGINT (a terminal's Ctrl-C)
    up.proc.send_signal(signal.SIGINT)
    code = up.proc.wait(timeout=90)

    # Then it stopped every child cleanly, exit 0, and none of them (nor their children) is left
    stdout = up.stdout()
    assert code == 0, up.logs()
    assert "SIGINT received" in stdout and "parkway up: stopped (" in stdout, stdout
    wait_for(lambda: not any(group_alive(pid) for pid in pids.values()), timeout=10, what="no child left")
    # And the PostgreSQL it started is stopped too, and its broker
    assert embedded.postmaster(embedded.data_dir(up.home)) is None and not group_alive(postgres.pid)
    assert valkey.problem(up.home) is not None
    # And stopping recorded no cancellation: the waiting run still waits on its pending question
    with home_database(up.home) as db:
        statuses = {row.id: row.status for row in db.execute(text("SELECT id, status FROM runs"))}
        asked = [tuple(r) for r in db.execute(text("SELECT status FROM interactions WHERE run_id = :r"), {"r": second})]
        effects = [tuple(r) for r in db.execute(text("SELECT run_id, tag FROM test_effects"))]
        closed = db.execute(
            text("SELECT type FROM events WHERE type LIKE '%.canceled' OR type LIKE '%.interrupted'")
        ).all()
    assert statuses == {run_id: "completed", second: "waiting"}
    assert effects == [(run_id, "one_done")]
    assert asked == [("pending",)]
    assert closed == []


class _Healthy(BaseHTTPRequestHandler):
    """Another server on the port, which answers ``/healthz`` as Parkway's API would."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *_: object) -> None:
        return None


@contextmanager
def _taken_port(answers_http: bool) -> Iterator[int]:
    """A port on 127.0.0.1 someone else listens on: a bare socket, or a server answering 200."""
    if not answers_http:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            yield int(taken.getsockname()[1])
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _up_until_it_exits(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """``parkway up --no-flower`` run until it exits by itself (two minutes at most): code, stdout, stderr."""
    out, err = tmp_path / "until.out", tmp_path / "until.err"
    proc = launch(["up", "--no-flower", "--grace", "20", *args], env=env, cwd=tmp_path, out=out, err=err)
    try:
        code = proc.wait(timeout=120)
    finally:
        stop(proc, [])
    return code, out.read_text(errors="replace"), err.read_text(errors="replace")


@pytest.mark.parametrize("answers_http", [False, True], ids=["silent", "answers-healthz"])
def test_up__a_child_that_dies_during_startup_stops_everything(
    tmp_path: Path, migrated_home: Path, answers_http: bool
) -> None:
    # Given the API's port already taken by someone else (one that may even answer /healthz); a home migrated
    # before (what up does after migrating is under test)
    env = embedded_env(PARKWAY_HOME=str(migrated_home), PARKWAY_IMPORTS="tests.workflows")
    with _taken_port(answers_http) as port:
        code, stdout, stderr = _up_until_it_exits(tmp_path, env, "--port", str(port))
    pids = child_pids(stdout)
    # Then it says which child died, stops the others, and exits non-zero with nothing left behind
    assert code == 1, stdout + stderr[-3000:]
    assert set(pids) == {"broker", "api", "worker", "outbound", "beat"}, stdout
    assert "api exited during startup" in stdout, stdout
    assert "api ready" not in stdout, "another server's answer is not this API being ready"
    assert "flower" not in stdout
    assert not any(group_alive(pid) for pid in pids.values())


def test_up__a_broker_nobody_answers__the_api_is_not_called_ready_and_up_says_why(
    tmp_path: Path, migrated_home: Path
) -> None:
    # Given a configured broker nothing listens on (in a home migrated before)
    broker = f"redis://127.0.0.1:{free_port()}/0"
    env = embedded_env(PARKWAY_HOME=str(migrated_home), PARKWAY_IMPORTS="tests.workflows", PARKWAY_BROKER_URL=broker)
    # (the budget outlasts the API's own start on a loaded 2-core host: the broker is what it must report)
    code, stdout, stderr = _up_until_it_exits(tmp_path, env, "--port", str(free_port()), "--startup-timeout", "30")
    # Then up stops, exit 1, and says the API is not ready because its broker is unreachable
    assert code == 1, stdout + stderr[-3000:]
    assert "api ready" not in stdout, stdout
    why = r"api not ready: http://\S+/readyz answers 503: not ready: the broker is unreachable"
    assert re.search(why, stdout), stdout
    assert not any(group_alive(pid) for pid in child_pids(stdout).values())


@pytest.mark.parametrize("login", ["nocolon", ":password", "user:", "ops:s3cret,nocolon"])
def test_up__a_flower_login_nobody_could_use_is_refused_before_anything_starts(
    tmp_path: Path, home: Path, login: str
) -> None:
    # Given FLOWER_BASIC_AUTH that is not user:password (or a comma-separated list of them)
    up = start_up(tmp_path, home, extra_env={"FLOWER_BASIC_AUTH": login})
    try:
        wait_for(lambda: up.proc.poll() is not None, timeout=30, what="parkway up to refuse")
    finally:
        up.stop()
    # Then it refuses in one line naming the variable, never its value, exit 2, having started nothing
    assert up.proc.returncode == 2, up.logs()
    [line] = up.err.read_text().strip().splitlines()
    assert line == ("parkway up: FLOWER_BASIC_AUTH must be user:password (neither empty), or a comma-separated "
                    "list of them"), line  # fmt: skip
    assert "nocolon" not in line and "s3cret" not in line
    assert up.stdout() == ""
