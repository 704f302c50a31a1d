"""End to end over real HTTP: ``uvicorn api.app:app`` and a ``celery worker`` as subprocesses."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest
from sqlalchemy import text

from parkway.db import get_engine
from tests.api.conftest import ADMIN, AGENT, HUMAN, STRANGER, Actors, ApiServer, make_actors
from tests.proxy import through_proxy
from tests.support import TARGET, Stack, Worker, effects, wait_for


@dataclass
class Live:
    server: ApiServer
    http: httpx.Client
    actors: Actors
    worker: Worker

    def get(self, path: str, who: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, headers=self.actors.auth(who) if who else {}, **kwargs)

    def post(self, path: str, body: Any, who: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = {**(self.actors.auth(who) if who else {}), **kwargs.pop("headers", {})}
        return self.http.post(path, json=body, headers=headers, **kwargs)


@pytest.fixture(scope="module")
def live(stack: Stack, server: ApiServer) -> Iterator[Live]:
    with server.client() as http:
        yield Live(server=server, http=http, actors=make_actors(http), worker=stack.start_worker())


def start(live: Live, workflow: str, payload: Any = None) -> str:
    made = live.post("/v1/runs", {"workflow": workflow, "payload": payload or {}, "target": TARGET}, AGENT)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def wait_run(live: Live, run_id: str, status: str, timeout: float = 40) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run: dict[str, Any] = live.get(f"/v1/runs/{run_id}", HUMAN).json()
        return run if run["status"] == status else None

    return wait_for(reached, timeout=timeout, what=f"run {run_id} {status} over HTTP")


def test_start_list_answer_complete__all_over_http(live: Live) -> None:
    run_id = start(live, "t.ask_two", {"service": "billing"})
    parked = wait_run(live, run_id, "waiting")
    assert {i["key"] for i in parked["interactions"]} == {"window", "reason"}
    listed = live.get("/v1/interactions", HUMAN, params={"status": "pending", "target": TARGET, "run_id": run_id})
    by_key = {i["key"]: i for i in listed.json()["items"]}
    assert set(by_key) == {"window", "reason"}
    for key, value in (("window", "tonight"), ("reason", "maintenance")):
        receipt = live.post(f"/v1/interactions/{by_key[key]['id']}/answer", {"response_id": key, "value": value}, HUMAN)
        assert receipt.status_code == 200, receipt.text
    done = wait_run(live, run_id, "completed")
    assert done["result"]["window"] == "tonight" and done["result"]["by"] == HUMAN
    assert done["completed_at"] and done["interactions"] == []

    # The run's events arrive once final (no older write transaction still open): wait for the last one
    def events_through_completion() -> list[str] | None:
        types = [e["type"] for e in live.get(f"/v1/runs/{run_id}/events", HUMAN).json()["items"]]
        return types if "run.completed" in types else None

    types = wait_for(events_through_completion, what="the run's events through run.completed")
    assert types.count("run.completed") == 1 and types.index("interaction.answered") < types.index("run.completed")
    assert effects(run_id) == 1


def metric(live: Live, line_start: str) -> float:
    for line in live.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


def test_fifty_concurrent_answers__exactly_one_200(live: Live) -> None:
    run_id = start(live, "t.ask_one")
    iid = wait_run(live, run_id, "waiting")["interactions"][0]["id"]
    conflicts_before = metric(live, 'parkway_answers_total{outcome="conflict"}')
    gate = threading.Barrier(50)

    def one(n: int) -> tuple[int, dict[str, Any]]:
        with live.server.client() as http:
            gate.wait(timeout=30)
            response = http.post(
                f"/v1/interactions/{iid}/answer",
                json={"response_id": f"racer-{n}", "value": f"v{n}"},
                headers=live.actors.auth(HUMAN),
            )
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    codes = sorted(code for code, _ in results)
    assert codes == [200] + [409] * 49
    winner = next(body for code, body in results if code == 200)
    losers = [body for code, body in results if code == 409]
    assert {b["state"]["value"] for b in losers} == {f"v{winner['response_id'].split('-')[1]}"}
    assert metric(live, 'parkway_answers_total{outcome="conflict"}') - conflicts_before == 49
    wait_run(live, run_id, "completed")
    assert effects(run_id) == 1


# --------------------------------------------------------------------------- authorization matrix


def matrix(live: Live, run_id: str, iid: str, revoked: str) -> dict[str, Any]:
    """Observed status codes (lists: the number of this run's items seen)."""
    bad = {"Authorization": "Bearer pk_forged"}
    body = {"workflow": "t.ask_one", "payload": {}, "target": TARGET}

    def listed(who: str) -> int:
        items = live.get("/v1/interactions", who, params={"run_id": run_id}).json()["items"]
        return len(items)

    observed: dict[str, Any] = {
        "no token: list interactions": live.get("/v1/interactions").status_code,
        "bad token: read run": live.http.get(f"/v1/runs/{run_id}", headers=bad).status_code,
        "human starts a run": live.post("/v1/runs", body, HUMAN).status_code,
        "agent creates a principal": live.post("/v1/principals", {"kind": "admin", "name": "x"}, AGENT).status_code,
        "agent answers": live.post(
            f"/v1/interactions/{iid}/answer", {"response_id": "a", "value": "x"}, AGENT
        ).status_code,
        "granted human reads the interaction": live.get(f"/v1/interactions/{iid}", HUMAN).status_code,
    }
    for label, who in (("no grant", STRANGER), ("revoked", revoked)):
        observed[f"{label}: list (items of the run)"] = listed(who)
        observed[f"{label}: read interaction"] = live.get(f"/v1/interactions/{iid}", who).status_code
        observed[f"{label}: read run"] = live.get(f"/v1/runs/{run_id}", who).status_code
        observed[f"{label}: read run events"] = live.get(f"/v1/runs/{run_id}/events", who).status_code
        observed[f"{label}: answer"] = live.post(
            f"/v1/interactions/{iid}/answer", {"response_id": "s", "value": "x"}, who
        ).status_code
        observed[f"{label}: cancel"] = live.post(
            f"/v1/interactions/{iid}/cancel", {"response_id": "c"}, who
        ).status_code
    return observed


EXPECTED = {
    "no token: list interactions": 401,
    "bad token: read run": 401,
    "human starts a run": 403,
    "agent creates a principal": 403,
    "agent answers": 403,
    "granted human reads the interaction": 200,
    **{
        f"{label}: {what}": code
        for label in ("no grant", "revoked")
        for what, code in (
            ("list (items of the run)", 0),
            ("read interaction", 403),
            ("read run", 403),
            ("read run events", 403),
            ("answer", 403),
            ("cancel", 403),
        )
    },
}


def test_authorization_matrix__holds_after_revoke_and_after_restarting_api_and_worker(live: Live, stack: Stack) -> None:
    # Given a parked run, and a human whose grant is revoked
    run_id = start(live, "t.ask_one")
    iid = wait_run(live, run_id, "waiting")["interactions"][0]["id"]
    name = f"revoked-{uuid.uuid4().hex[:6]}"
    made = live.post("/v1/principals", {"kind": "human", "name": name}, ADMIN).json()
    live.actors.tokens[name] = made["token"]
    grant = live.post("/v1/grants", {"principal": name, "target": TARGET}, ADMIN).json()
    assert live.get(f"/v1/interactions/{iid}", name).status_code == 200
    assert live.http.delete(f"/v1/grants/{grant['id']}", headers=live.actors.auth(ADMIN)).status_code == 204
    # Then the matrix is as expected
    before = matrix(live, run_id, iid, name)
    assert before == EXPECTED
    # And after a full restart of the API and the worker, nothing changes
    live.server.restart()
    live.worker.terminate()
    live.worker = stack.start_worker()
    after = matrix(live, run_id, iid, name)
    assert after == EXPECTED
    print("\nauthorization matrix (before restart / after restart):")
    for row, code in before.items():
        print(f"  {row:45} {code} / {after[row]}")
    # The question itself survived the restart and still takes its answer
    assert live.post(f"/v1/interactions/{iid}/answer", {"response_id": "ok", "value": "go"}, HUMAN).status_code == 200
    wait_run(live, run_id, "completed")


# --------------------------------------------------------------------------- server-sent events


def read_sse(
    live: Live, who: str, *, count: int, timeout: float = 10, params: dict[str, str] | None = None, **headers: str
) -> list[tuple[int, dict[str, Any]]]:
    """Read up to ``count`` events from the stream, giving up after ``timeout`` seconds of waiting. (A read
    timeout ends the line iterator for good, so a read may wait the whole ``timeout``: the stream may be quiet
    for a while between two events.)"""
    events: list[tuple[int, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=live.server.url, timeout=httpx.Timeout(5, read=timeout)) as http:
        url = "/v1/events/stream"
        with http.stream("GET", url, params=params, headers={**live.actors.auth(who), **headers}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            seq: int | None = None
            with contextlib.suppress(httpx.ReadTimeout):  # quiet for the whole timeout
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        assert seq is not None
                        events.append((seq, json.loads(line[6:])))
                    if len(events) >= count or time.monotonic() >= deadline:
                        break
    return events


def test_event_stream__ids_are_seqs_resumes_with_last_event_id_and_ends_on_disconnect(live: Live) -> None:
    run_id = start(live, "t.ask_one")
    wait_run(live, run_id, "waiting")
    # Delivery waits while any write transaction in the cluster is open: wait for the park's events
    items = wait_for(
        lambda: (
            (got := live.get(f"/v1/runs/{run_id}/events", HUMAN).json()["items"])
            and got[-1]["type"] == "interaction.asked"
            and got
        ),
        what="the parked run's events",
    )
    mine = [e["seq"] for e in items]
    # From the start: every event is (id=seq, data=the event), in order
    first = read_sse(live, HUMAN, count=len(mine), **{"Last-Event-ID": str(mine[0] - 1)})
    assert [seq for seq, _ in first] == [data["seq"] for _, data in first]
    assert [seq for seq, _ in first] == sorted(seq for seq, _ in first)
    assert [seq for seq, data in first if data["run_id"] == run_id] == mine
    assert set(first[0][1]) == {"seq", "run_id", "type", "at", "data", "trace_id"}
    # Resumed with Last-Event-ID: only what came after it
    resumed = read_sse(live, HUMAN, count=len(mine) - 2, **{"Last-Event-ID": str(mine[1])})
    assert [seq for seq, _ in resumed] == mine[2:]
    # A live event arrives while the stream is open
    got: list[tuple[int, dict[str, Any]]] = []
    reader = threading.Thread(
        target=lambda: got.extend(read_sse(live, HUMAN, count=1, timeout=15, **{"Last-Event-ID": str(mine[-1])}))
    )
    reader.start()
    iid = live.get(f"/v1/runs/{run_id}", HUMAN).json()["interactions"][0]["id"]
    assert live.post(f"/v1/interactions/{iid}/answer", {"response_id": "sse", "value": "go"}, HUMAN).status_code == 200
    reader.join(timeout=20)
    assert got and got[0][1]["type"] == "interaction.answered" and got[0][1]["run_id"] == run_id
    # A caller without a grant sees none of it
    assert read_sse(live, STRANGER, count=1, timeout=2, **{"Last-Event-ID": "0"}) == []
    # Every stream above was closed by its client: the server ended them all
    wait_for(lambda: metric(live, "parkway_event_streams_open") == 0, timeout=10, what="streams closed")


def test_event_stream__of_one_run_only_its_events_each_valid_against_the_openapi_item_schema(live: Live) -> None:
    # Given two parked runs, and the stream's message schema as the live OpenAPI describes it
    mine, other = start(live, "t.ask_one"), start(live, "t.ask_one")
    for run_id in (mine, other):
        wait_run(live, run_id, "waiting")
    spec = live.get("/openapi.json").json()
    item = spec["paths"]["/v1/events/stream"]["get"]["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    event_schema = {**item["properties"]["data"]["contentSchema"], "components": spec["components"]}
    wanted = len(live.get(f"/v1/runs/{mine}/events", HUMAN).json()["items"])

    # When the stream is read from the start with ?run_id=
    got = read_sse(live, HUMAN, count=wanted, params={"after": "0", "run_id": mine})

    # Then it gives that run's events, all of them, in order, and each validates against the described schema
    assert [data["run_id"] for _, data in got] == [mine] * wanted, got
    assert [seq for seq, _ in got] == [e["seq"] for e in live.get(f"/v1/runs/{mine}/events", HUMAN).json()["items"]]
    for _, data in got:
        jsonschema.validate(data, event_schema)
    assert item["properties"]["data"]["contentMediaType"] == "application/json"


def test_event_stream__of_a_run_the_caller_may_not_read_403_of_no_run_404(live: Live) -> None:
    run_id = start(live, "t.ask_one")
    for who, run, code in ((STRANGER, run_id, 403), (HUMAN, "no-such-run", 404), (HUMAN, "a b", 422)):
        refused = live.get("/v1/events/stream", who, params={"run_id": run})
        assert refused.status_code == code, (who, run, refused.text)
        assert refused.json()["error"] == {403: "forbidden", 404: "not_found", 422: "validation_error"}[code]


def test_finished_by__names_the_worker_s_node_and_pid_not_an_execution_id(live: Live) -> None:
    # Given a run a real worker completes
    run_id = start(live, "t.after")
    done = wait_run(live, run_id, "completed")

    # Then the run says which worker process ended it: its Celery node name and the pid
    with get_engine().connect() as conn:
        nodes = set(conn.execute(text("SELECT node FROM workers")).scalars())
    node, _, pid = str(done["finished_on"]).partition(" pid ")
    assert node in nodes and pid.isdigit(), (done["finished_on"], nodes)
    assert node.startswith(live.worker.name), (node, live.worker.name)


def test_body_over_1_mib__413_from_the_real_server(live: Live) -> None:
    big = b"x" * ((1 << 20) + 1)
    declared = live.http.post("/v1/runs", content=big, headers=live.actors.auth(AGENT))
    assert declared.status_code == 413 and declared.json()["error"] == "too_large"

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"y" * 65536

    streamed = live.http.post("/v1/runs", content=chunks(), headers=live.actors.auth(AGENT))
    assert streamed.status_code == 413 and streamed.json()["error"] == "too_large"


@pytest.mark.parametrize(
    ("problem", "says"),
    [
        ("schema", r"refusing to start: the database schema is at revision ffff_future"),
        ("key", r"PARKWAY_SECRET_KEY"),
    ],
)
def test_api_process__refuses_to_start_with_a_clear_message(
    stack: Stack, fresh_db: str, problem: str, says: str
) -> None:
    env: dict[str, str | None] = {}
    if problem == "schema":
        with get_engine().begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_future'"))
    else:
        env["PARKWAY_SECRET_KEY"] = "too-short"
    api = ApiServer(database_url=fresh_db, log=stack.logs / f"refused-{problem}.log")
    api.start(wait=False, **env)
    code = api.wait_exit()
    assert code == 3, api.text()[-2000:]
    assert re.search(says, api.text()), api.text()[-2000:]
    assert "Traceback" not in api.text(), api.text()[-2000:]  # one line says why: no traceback around it


def test_api_process__started_while_the_database_cannot_be_reached__waits_for_it_then_serves(
    stack: Stack, fresh_db: str
) -> None:
    # Given the database unreachable (a proxy in front of it that refuses connections, as in a restart)
    proxy, through = through_proxy(fresh_db)
    api = ApiServer(database_url=through, log=stack.logs / "api-waiting.log")
    api.start(wait=False)
    try:
        # When the API starts, then it says it waits (and does not exit)
        assert api.proc is not None
        wait_for(lambda: "the database cannot be reached yet; waiting" in api.text() or api.proc.poll() is not None,
                 timeout=40, what="the API waiting for the database")  # fmt: skip
        assert api.proc.poll() is None, api.text()[-2000:]
        # And once the database can be reached, it serves, ready
        proxy.start()
        wait_for(api.ready, timeout=40, what="the API serving")
        assert httpx.get(f"{api.url}/readyz", timeout=5).status_code == 200
        assert "refusing to start" not in api.text(), api.text()[-2000:]
    finally:
        api.stop()
        proxy.cut()
