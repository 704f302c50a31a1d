"""The Go example (examples/go: a pull worker with Go's standard library only) against a real stack: built
with ``go build``, run as a subprocess against a real uvicorn and this module's PostgreSQL database. It
parks the question of a run it serves, is resumed with the answer and completes the run once; SIGTERM
stops it. No Celery worker: what only a remote worker serves is leased, never published. Without ``go``
these tests skip, or fail when ``PARKWAY_REQUIRE_SERVICES=1`` (CI installs Debian's golang-go: .ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import remote_principals
from tests.acceptance.protocol_support import receipts
from tests.api.conftest import ApiServer
from tests.support import ROOT, TARGET, Stack, Worker, continuations, event_types, wait_for

EXAMPLE = ROOT / "examples" / "go"
AGENT, HUMAN, WORKER, ADMIN = "go-agent", "go-ana", "go-worker", "go-root"
LEASE_S = "5"  # the shortest lease the API grants (the example's default is 30 s): a lost item comes back soon


def build(out: Path) -> Path:
    """``go build`` of the example, offline (it has no dependency) and with its caches under ``out``."""
    go = shutil.which("go")
    if go is None:
        if os.environ.get("PARKWAY_REQUIRE_SERVICES") == "1":
            pytest.fail("the Go example's test needs go (apt-get install golang-go; .ci/run does)")
        pytest.skip("go is not installed")
    # Debian's go ships its standard library compiled (with cgo): a cold cache builds in seconds.
    env = {**os.environ, "GOCACHE": str(out / "gocache"), "GOPATH": str(out / "gopath"), "GOFLAGS": "",
           "GOPROXY": "off", "GOTOOLCHAIN": "local"}  # fmt: skip
    binary = out / "triage"
    built = subprocess.run([go, "build", "-o", str(binary), "."], cwd=EXAMPLE, env=env, capture_output=True,
                           text=True, timeout=240)  # fmt: skip
    assert built.returncode == 0, f"go build failed:\n{built.stdout}\n{built.stderr}"
    return binary


class Triage:
    """The API, its principals' tokens, and the example's binary, started as often as a test needs."""

    def __init__(self, stack: Stack, server: ApiServer, http: httpx.Client, binary: Path) -> None:
        self.stack, self.server, self.http, self.binary = stack, server, http, binary
        self.tokens = remote_principals(http, admin=ADMIN, agent=AGENT, human=HUMAN, worker=WORKER)

    def start(self, url: str | None = None) -> Worker:
        """The example as a subprocess of its own process group (talking to the API, or to ``url`` in front of
        it), once its first lease call was answered (from then on the API counts what it serves as served)."""
        name = f"go-triage-{uuid.uuid4().hex[:6]}"
        log = self.stack.logs / f"{name}.log"
        env = {**os.environ, "PARKWAY_URL": url or self.server.url, "WORKER_TOKEN": self.tokens[WORKER],
               "PARKWAY_TARGET": TARGET, "PARKWAY_LEASE_S": LEASE_S}  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(self.binary)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        process = Worker(proc=proc, log=log, name=name)
        self.stack.workers.append(process)  # killed by stack.stop_all() if a test leaves it running
        wait_for(lambda: "serving ticket.decide@1, ticket.triage" in process.text() or not process.alive(),
                 timeout=20, what="the Go example's first lease")  # fmt: skip
        assert process.alive(), f"the Go example exited with {proc.returncode}:\n{process.text()}"
        return process

    def call(self, method: str, path: str, who: str, body: Any = None, **headers: str) -> httpx.Response:
        auth = {"Authorization": f"Bearer {self.tokens[who]}", **headers}
        return self.http.request(method, path, json=body, headers=auth)

    def run(self, run_id: str) -> dict[str, Any]:
        got = self.call("GET", f"/v1/runs/{run_id}", HUMAN)
        assert got.status_code == 200, got.text
        return dict(got.json())

    def wait_run(self, run_id: str, worker: Worker, *, left: tuple[str, ...], timeout: float = 20) -> dict[str, Any]:
        """The run once its status is none of ``left``; on a timeout, the error shows the example's log."""
        try:
            return wait_for(lambda: (run := self.run(run_id))["status"] not in left and run, timeout=timeout,
                            what=f"run {run_id} to leave {left}")  # fmt: skip
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the Go example's log:\n{worker.text()}") from None


class FaultProxy(ThreadingHTTPServer):
    """An HTTP proxy in front of the API: it forwards each request as it is, except the first one ``matches``
    picks, which it answers with ``status`` and ``body`` itself (nothing reaches the API); ``answered`` counts
    those."""

    daemon_threads = True

    def __init__(self, upstream: str, matches: Callable[[str, str, bytes], bool], status: int, body: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.matches, self.status, self.body = upstream, matches, status, body
        self.answered = 0
        self._lock = threading.Lock()
        self.http = httpx.Client(base_url=upstream, timeout=60)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fault(self, method: str, path: str, body: bytes) -> bool:
        with self._lock:
            if self.answered or not self.matches(method, path, body):
                return False
            self.answered += 1
            return True

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.http.close()


class _Forward(BaseHTTPRequestHandler):
    server: FaultProxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.fault("POST", self.path, body):
            self._answer(self.server.status, json.dumps(self.server.body).encode())
            return
        headers = {name: self.headers[name] for name in ("Authorization", "Content-Type") if self.headers[name]}
        try:
            answer = self.server.http.post(self.path, content=body, headers=headers)
        except httpx.HTTPError:  # the proxy closing under a long poll: no answer, as a cut connection
            self.close_connection = True
            return
        self._answer(answer.status_code, answer.content)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def triage(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Triage]:
    binary = build(tmp_path_factory.mktemp("go-example"))
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-go.log").start()
    try:
        with server.client() as http:
            yield Triage(stack, server, http, binary)
    finally:
        stack.stop_all()
        server.stop()


def test_go_example__parks_its_question__completes_once_with_the_answer(triage: Triage) -> None:
    worker = triage.start()
    body = {"workflow": "ticket.triage", "payload": {"ticket": 4711}, "target": TARGET}
    started = triage.call("POST", "/v1/runs", AGENT, body, **{"Idempotency-Key": uuid.uuid4().hex})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]

    # The example leases the start and parks the question: the run waits in Parkway.
    run = triage.wait_run(run_id, worker, left=("running",))
    assert run["status"] == "waiting", worker.text()
    (question,) = run["interactions"]
    assert (question["key"], question["prompt"]) == ("priority", "Priority of ticket 4711?")

    answered = triage.call("POST", f"/v1/interactions/{question['id']}/answer", HUMAN,
                           {"response_id": uuid.uuid4().hex, "value": "high"})  # fmt: skip
    assert answered.status_code == 200, answered.text

    # It leases the resume with the answer and completes the run with what it derived from it, once.
    done = triage.wait_run(run_id, worker, left=("waiting", "running"))
    assert (done["status"], done["result"]) == ("completed", {"ticket": 4711, "priority": "high", "by": HUMAN}), (
        worker.text()
    )
    assert receipts(run_id) == 2  # the park and the completion, one lease each
    assert [c.attempts for c in continuations(run_id)] == [1, 1]
    assert event_types(run_id).count("run.completed") == 1
    assert worker.alive(), worker.text()
    assert worker.terminate(timeout=15) == 0, worker.text()


def test_go_example__sigterm_while_idle__exits_0(triage: Triage) -> None:
    worker = triage.start()  # in its long poll: nothing is due

    assert worker.terminate(timeout=15) == 0, worker.text()
    assert worker.text().rstrip().endswith("stopped"), worker.text()


def test_go_example__a_park_refused_with_422_mid_rollout__is_left_to_its_lease__not_failed(triage: Triage) -> None:
    # Given: an older server answering a park on a version nobody serves at this moment with 422 (a rollout),
    # once, between the example and the API
    def a_park(method: str, path: str, body: bytes) -> bool:
        return path.endswith("/complete") and b'"type":"park"' in body

    detail = "park on ticket.decide@1: no live worker serves version 1 of ticket.decide"
    proxy = FaultProxy(triage.server.url, a_park, 422, {"error": "invalid_outcome", "detail": detail})
    worker = triage.start(url=proxy.url)
    try:
        body = {"workflow": "ticket.triage", "payload": {"ticket": 42}, "target": TARGET}
        started = triage.call("POST", "/v1/runs", AGENT, body, **{"Idempotency-Key": uuid.uuid4().hex})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]

        # Then: not failed; the item went back by its lease (LEASE_S) and its next attempt parked
        run = triage.wait_run(run_id, worker, left=("running",), timeout=45)
        assert (run["status"], run["error"]) == ("waiting", None), worker.text()
        assert proxy.answered == 1
        assert [c.attempts for c in continuations(run_id)][:1] == [2]
        assert worker.terminate(timeout=15) == 0, worker.text()
    finally:
        worker.kill()  # before the proxy it long-polls through
        proxy.close()
