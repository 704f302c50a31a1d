"""A sensitive answer field, end to end over HTTP through a real worker: encrypted at rest, read only by
the continuation that consumes it, erased in that transaction, and never anywhere else."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import inspect, select, text

from models.tables import Interaction
from parkway.db import get_engine, transaction
from tests.api.conftest import AGENT, HUMAN, ApiServer, make_actors
from tests.support import TARGET, Stack, wait_for

IMPORTS = "tests.workflows,tests.api.flows"


@pytest.fixture(scope="module")
def api(stack: Stack) -> ApiServer:
    server = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-sensitive.log")
    server.start(PARKWAY_IMPORTS=IMPORTS)
    yield server  # type: ignore[misc]
    server.stop()


def _everything_stored() -> str:
    """Every column of every row of every table, as text."""
    engine = get_engine()
    chunks = []
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                chunks.append(repr(tuple(row)))
    return "\n".join(chunks)


def _broker_contents(stack: Stack) -> str:
    if stack.broker == "redis":
        import redis

        client = redis.Redis.from_url(stack.broker_url)
        out = []
        for key in client.keys("*"):
            kind = client.type(key)
            if kind == b"list":
                out += [repr(v) for v in client.lrange(key, 0, -1)]
            elif kind == b"hash":
                out += [repr(v) for v in client.hgetall(key).values()]
            elif kind == b"string":
                out.append(repr(client.get(key)))
            elif kind == b"zset":
                out += [repr(v) for v in client.zrange(key, 0, -1)]
            elif kind == b"set":
                out += [repr(v) for v in client.smembers(key)]
        return "\n".join(out)
    folder = stack.home / "broker"
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_sensitive_field__never_stored_in_clear_and_erased_after_consumption(stack: Stack, api: ApiServer) -> None:
    worker = stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
    otp = f"{uuid.uuid4().int % 10**6:06d}"
    user = f"user-{uuid.uuid4().hex[:8]}"
    with api.client() as http:
        actors = make_actors(http)
        # Given a run asking for a one-time code marked sensitive
        made = http.post(
            "/v1/runs", json={"workflow": "api.login", "payload": {}, "target": TARGET}, headers=actors.auth(AGENT)
        )
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]

        def asked() -> list[dict[str, object]]:
            body = http.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
            return body["interactions"]  # type: ignore[no-any-return]

        [question] = wait_for(asked, what="the question asked", sweep=True)
        assert worker.terminate() == 0  # nothing consumes the answer until we have looked at it
        # When the person answers with the code
        answered = http.post(
            f"/v1/interactions/{question['id']}/answer",
            json={"response_id": "r1", "value": {"user": user, "otp": otp}},
            headers=actors.auth(HUMAN),
        )
        assert answered.status_code == 200, answered.text
        # While waiting for its consumer the code is stored only sealed, and reads as "***"
        with transaction() as session:
            row = session.get_one(Interaction, question["id"])
            assert row.status == "answered" and row.secret is not None
            assert otp not in row.secret and row.value == {"user": user}
        assert otp not in _everything_stored()
        shown = http.get(f"/v1/interactions/{question['id']}", headers=actors.auth(HUMAN)).json()
        assert shown["value"] == {"user": user, "otp": "***"}

        def done() -> bool:
            return http.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()["status"] == "completed"

        worker = stack.start_worker(PARKWAY_IMPORTS=IMPORTS)
        wait_for(done, timeout=40, what="run completed", sweep=True)
        run = http.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
        assert run["result"] == {"user": user}  # the continuation read the code (its body indexes it)
        events = http.get(f"/v1/runs/{run_id}/events", headers=actors.auth(HUMAN)).text
        retry = http.post(
            f"/v1/interactions/{question['id']}/answer",
            json={"response_id": "r1", "value": {"user": user, "otp": otp}},
            headers=actors.auth(HUMAN),
        )
        assert retry.status_code == 200  # an exact retry is still recognized after erasure
    # Then the code is nowhere: no table, no event, no log, no broker message
    with transaction() as session:
        assert session.scalar(select(Interaction.secret).where(Interaction.id == question["id"])) is None
    assert otp not in _everything_stored()
    assert otp not in events
    assert otp not in api.text()
    assert all(otp not in w.text() for w in stack.workers)
    assert otp not in _broker_contents(stack)
    assert user in _everything_stored()  # the test can see what it looks for


def test_wrong_key__refuses_to_start_the_api(stack: Stack, tmp_path: Path) -> None:
    server = ApiServer(database_url=stack.database_url, log=tmp_path / "weak.log")
    server.start(wait=False, PARKWAY_SECRET_KEY="change-me")
    assert server.wait_exit() != 0
    assert "PARKWAY_SECRET_KEY" in server.text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server.url}/healthz", timeout=1)
