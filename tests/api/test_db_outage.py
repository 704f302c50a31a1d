"""A database outage is a 503 with ``Retry-After``, not a 500, and once the database is back nothing is lost.

The shared PostgreSQL server is never stopped: a real ``uvicorn`` reaches it through a TCP proxy (a thread
of this test, in front of its TCP port or, embedded, its unix socket), which is cut (every connection closed,
new ones refused, as in a restart) and restored.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.api.conftest import ADMIN, AGENT, HUMAN, ApiServer, drive, make_actors
from tests.conftest import pg_admin_url
from tests.proxy import Proxy, through_proxy
from tests.support import TARGET, Stack, interactions, wait_for


@pytest.fixture
def proxied(stack: Stack) -> Iterator[tuple[Proxy, ApiServer]]:
    proxy, through = through_proxy(stack.database_url)
    proxy.start()
    server = ApiServer(database_url=through, log=stack.logs / "uvicorn-outage.log").start()
    try:
        yield proxy, server
    finally:
        server.stop()
        proxy.cut()


def test_outage__503_with_retry_after_then_no_500_and_the_retried_answer_gets_its_receipt(
    proxied: tuple[Proxy, ApiServer],
) -> None:
    proxy, server = proxied
    http = server.client(timeout=20)
    actors = make_actors(http)
    made = http.post("/v1/runs", json={"workflow": "t.ask_one", "payload": {}, "target": TARGET},
                     headers=actors.auth(AGENT))  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    drive(run_id)
    iid = interactions(run_id)["go"].id
    answer = {"response_id": "answer-through-the-outage", "value": "yes"}

    def requests() -> list[tuple[str, str, dict[str, Any]]]:
        return [
            ("GET", f"/v1/runs/{run_id}", {"headers": actors.auth(HUMAN)}),
            ("GET", "/v1/interactions", {"headers": actors.auth(HUMAN)}),
            ("GET", f"/v1/runs/{run_id}/events", {"headers": actors.auth(AGENT)}),
            ("POST", f"/v1/interactions/{iid}/answer", {"headers": actors.auth(HUMAN), "json": answer}),
            ("POST", "/v1/runs", {"headers": actors.auth(AGENT),
                                  "json": {"workflow": "t.ask_one", "payload": {}, "target": TARGET}}),
            ("POST", "/v1/grants", {"headers": actors.auth(ADMIN), "json": {"principal": HUMAN, "target": "x:y"}}),
            ("POST", f"/v1/interactions/{iid}/answer", {"headers": actors.auth(HUMAN), "json": {"value": 1}}),
        ]  # fmt: skip

    def send(request: tuple[str, str, dict[str, Any]]) -> httpx.Response:
        method, path, kwargs = request
        return http.request(method, path, **kwargs)

    def burst() -> list[int]:
        """24 reads, 6 at a time: each of the API's pooled connections is used."""
        with ThreadPoolExecutor(6) as pool:
            return [r.status_code for r in pool.map(send, [requests()[0]] * 24)]

    # A short cut found first by an answer (its statements are Core, on a connection of the pool):
    # the connection it found dead is replaced, and so is every other one the cut killed, though they were
    # in use moments ago, before a request gets one.
    assert burst() == [200] * 24
    proxy.cut()
    refused = send(requests()[3]).status_code  # (never an assert on the call itself: its repr holds tokens)
    assert refused == 503
    proxy.restore()
    assert burst() == [200] * 24

    # A longer outage: every kind of request while it lasts, and an event stream open when it begins
    ended: list[str] = []
    stream = threading.Thread(target=follow_stream, args=(server, actors.auth(HUMAN), ended), daemon=True)
    stream.start()
    wait_for(lambda: ended, what="the stream's first line")
    proxy.cut()
    during = [send(request) for _ in range(3) for request in requests()]
    for response in during:
        assert response.status_code == 503, (response.request.method, response.request.url, response.text)
        assert response.headers.get("retry-after", "").isdigit(), response.headers
        body = response.json()
        assert body["error"] == "unavailable" and isinstance(body["detail"], str), body
    assert interactions(run_id)["go"].status == "pending"  # the answer sent during the outage was not stored
    ready = http.get("/readyz")
    assert ready.status_code == 503, ready.text
    assert re.fullmatch(r"not ready: the database is unreachable \(OperationalError: .+\)", ready.json()["detail"])
    stream.join(timeout=30)
    assert ended[-1] == "ended", ended[-3:]  # a clean end of the body (the client resumes with Last-Event-ID)

    proxy.restore()
    # The pooled connections the cut killed are never handed out again: the first requests after it succeed
    after = burst()
    assert after == [200] * 24
    # The client's exact retry of the answer it sent during the outage goes through, and again gives the receipt
    first = send(requests()[3])
    assert first.status_code == 200, first.text
    again = send(requests()[3]).json()
    assert again == first.json()
    row = wait_for(lambda: interactions(run_id)["go"], what="the answer")
    assert (row.status, row.response_id) == ("answered", answer["response_id"])

    log = server.text()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]
    assert "database unavailable" in log
    print(f"\noutage: {len(during)} requests during the cut, all 503; {len(after)} after it, all 200;"
          f" proxy connections accepted {proxy.accepted}")  # fmt: skip
    http.close()


def follow_stream(server: ApiServer, auth: dict[str, str], lines: list[str]) -> None:
    """Read ``GET /v1/events/stream`` until it ends; the last line says how."""
    try:
        with httpx.stream("GET", f"{server.url}/v1/events/stream", headers=auth, timeout=30) as response:
            for line in response.iter_lines():
                lines.append(line)
        lines.append("ended")
    except httpx.HTTPError as exc:
        lines.append(f"broken: {type(exc).__name__}")


def test_restart_kills_the_pooled_connections__the_first_found_is_a_503_and_none_is_handed_out_again(
    fresh_db: str, tmp_path: Path
) -> None:
    """What a PostgreSQL restart does to a running API's pool, without restarting the shared server: every
    backend of the API is terminated (``57P01 terminating connection due to administrator command``)."""
    name = f"parkway-api-{uuid.uuid4().hex[:8]}"  # the API's own backends, and no one else's
    url = make_url(fresh_db).update_query_dict({"application_name": name})
    server = ApiServer(database_url=url.render_as_string(hide_password=False), log=tmp_path / "uvicorn.log")
    server.start()
    try:
        with server.client(timeout=20) as http:
            actors = make_actors(http)
            made = http.post("/v1/runs", json={"workflow": "t.ask_one", "payload": {}, "target": TARGET},
                             headers=actors.auth(AGENT))  # fmt: skip
            assert made.status_code == 201, made.text
            run_id = made.json()["id"]
            drive(run_id)
            iid = interactions(run_id)["go"].id
            answer = {"response_id": "answer-after-the-restart", "value": "yes"}

            def read(_: int) -> int:
                return http.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).status_code

            with ThreadPoolExecutor(6) as pool:
                assert list(pool.map(read, range(24))) == [200] * 24
            killed = terminate_backends(name)
            assert killed >= 2
            # The answer (statements on the driver's cursor) finds a dead connection first: a 503, unless
            # that connection was idle long enough to be pinged; then none of the others is handed out
            first = http.post(f"/v1/interactions/{iid}/answer", json=answer, headers=actors.auth(HUMAN))
            assert first.status_code in (200, 503), first.text
            if first.status_code == 503:
                assert first.headers["retry-after"].isdigit() and first.json()["error"] == "unavailable"
            with ThreadPoolExecutor(6) as pool:
                assert list(pool.map(read, range(24))) == [200] * 24
            retried = http.post(f"/v1/interactions/{iid}/answer", json=answer, headers=actors.auth(HUMAN))
            assert retried.status_code == 200, retried.text
        assert interactions(run_id)["go"].response_id == answer["response_id"]
        log = server.text()
        assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]
    finally:
        server.stop()


def terminate_backends(application_name: str) -> int:
    engine = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :n"
            return int(conn.execute(text(sql), {"n": application_name}).scalar_one())
    finally:
        engine.dispose()
