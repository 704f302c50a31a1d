"""Fuzzing the live API: Hypothesis sends JSON that Python reads but Parkway cannot store (lone surrogates,
NUL, NaN/Infinity/1e400, deep nesting) to every operation as each kind of principal; schemathesis fuzzes
the live OpenAPI schema with every check. No 5xx, and every response as documented."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, ApiServer, drive, make_actors
from tests.support import ROOT, TARGET, Stack, interactions

# Every check schemathesis has (`--checks all`), positive_data_acceptance (ST202: a schema-valid request
# rejected) included: its hooks (tests/api/fuzz_hooks.py) drop only a 422 for what no schema can know.
HOOKS = "tests.api.fuzz_hooks"


@pytest.fixture(scope="module")
def server(stack: Stack) -> Iterator[ApiServer]:
    """This module's uvicorn also knows the API-only workflows (``api.ask_any``: any JSON is a valid answer,
    so what reaches the store is the API's own check alone)."""
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn.log")
    api.start(PARKWAY_IMPORTS="tests.workflows,tests.api.flows")
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module")
def http(server: ApiServer) -> Iterator[httpx.Client]:
    """One client for the module: a new httpx client loads the CA bundle again, for TLS this server never speaks
    (that, not the requests, was most of what the Hypothesis test's own process spent)."""
    with server.client(timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def fuzz_actors(http: httpx.Client) -> Actors:
    return make_actors(http)


# --------------------------------------------------------------------------- Hypothesis: what JSON can say


class Raw(str):
    """JSON text sent as it is (``1e400`` is read as ``inf``; Python could not write it)."""


def encode(value: Any) -> str:
    """JSON text of ``value`` as a lenient client writes it: ``NaN``/``Infinity`` for non-finite floats,
    ``\\ud800`` escapes for lone surrogates (``ensure_ascii``), ``Raw`` leaves verbatim."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v) for v in value) + "]"
    return json.dumps(value)  # allow_nan: NaN, Infinity, -Infinity


CHARS = st.one_of(
    st.characters(),
    st.just("\x00"),
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates (Hypothesis leaves them out of text by default)
)
TEXT = st.one_of(
    st.text(CHARS, max_size=12),
    st.sampled_from(["\ud800", "\udfff", "a\x00b", "\x00", "team:ops\x00", "é\udc80", "api.ask_any", TARGET]),
)
RAW_NUMBERS = st.sampled_from(
    [Raw(n) for n in ("1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1e-400", "-0", "1" * 40, "1.5e308")]
)
# What Python's json reads but Parkway cannot store, drawn often so that a dozen examples find it
BAD = st.one_of(
    RAW_NUMBERS,
    st.sampled_from(["\ud800", "\udfff", "a\x00b", "\x00", float("nan"), float("inf"), float("-inf")]),
)
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), TEXT, RAW_NUMBERS
)
ANY = st.recursive(
    LEAVES, lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)  # fmt: skip
NESTED = st.integers(40, 3000).flatmap(
    lambda n: st.sampled_from([Raw("[" * n + "]" * n), Raw('{"a":' * n + "1" + "}" * n)])
)
JSON_VALUES = st.one_of(
    BAD,
    st.lists(st.one_of(BAD, ANY), min_size=1, max_size=3),
    st.dictionaries(TEXT, st.one_of(BAD, ANY), min_size=1, max_size=3),
    ANY,
    NESTED,
)


@dataclass
class World:
    """Real ids to aim at, and a valid body per operation to spoil one field of."""

    actors: Actors
    run_id: str
    pending: list[str]
    grant_id: str
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def world(http: httpx.Client, fuzz_actors: Actors) -> World:
    pending, run_id = [], ""
    for _ in range(4):
        made = http.post("/v1/runs", json={"workflow": "api.ask_any", "payload": {}, "target": TARGET},
                         headers=fuzz_actors.auth(AGENT))  # fmt: skip
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        drive(run_id)
        pending.append(interactions(run_id)["any"].id)
    grant = http.post("/v1/grants", json={"principal": HUMAN, "target": "fuzz:spare"},
                      headers=fuzz_actors.auth(ADMIN))  # fmt: skip
    assert grant.status_code == 201, grant.text
    return World(
        actors=fuzz_actors,
        run_id=run_id,
        pending=pending,
        grant_id=grant.json()["id"],
        bodies={
            "POST /v1/runs": {"workflow": "api.ask_any", "payload": {}, "target": TARGET},
            "POST /v1/interactions/{interaction_id}/answer": {"response_id": "fuzz", "value": {}},
            "POST /v1/interactions/{interaction_id}/cancel": {"response_id": "fuzz", "reason": "fuzz"},
            "POST /v1/principals": {"kind": "human", "name": "fuzz"},
            "POST /v1/grants": {"principal": HUMAN, "target": "fuzz:x"},
        },
    )


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    """Every operation of the API's OpenAPI schema, as (method, path template, operation)."""
    from api.app import app

    return [
        (method.upper(), path, operation)
        for path, methods in app.openapi()["paths"].items()
        for method, operation in methods.items()
    ]


OPERATIONS = operations()
EXAMPLES = 6  # per operation and kind: every operation x 3 kinds


def _request(world: World, method: str, path: str, operation: dict[str, Any], draw: Any) -> dict[str, Any]:
    """One request for the operation: real ids or fuzzed text in the path, fuzzed query parameters and
    headers, and a body that is a valid one with one field spoiled, fuzzed fields, or any JSON at all."""
    url = path
    query: list[str] = []
    headers: dict[str, Any] = {}
    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter["in"]
        if where == "path":
            real = {"run_id": world.run_id, "grant_id": world.grant_id}.get(name) or draw(
                st.sampled_from(world.pending)
            )
            value = draw(st.one_of(st.just(real), TEXT.filter(bool)))
            url = url.replace("{" + name + "}", quote(value.encode("utf-8", "surrogatepass"), safe=""))
        elif where == "query" and draw(st.booleans()):
            value = draw(st.one_of(TEXT, st.integers().map(str)))
            query.append(f"{name}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}")
        elif where == "header" and draw(st.booleans()):
            text = draw(st.one_of(TEXT, st.integers().map(str)))
            codec = draw(st.sampled_from(["utf-8", "latin-1"]))
            raw = text.encode(codec, "surrogatepass" if codec == "utf-8" else "replace")
            headers[name] = bytes(b for b in raw if b >= 0x20 and b != 0x7F)  # what HTTP can carry in a header
    if query:
        url += "?" + "&".join(query)
    content: bytes | None = None
    if "requestBody" in operation:
        base = dict(world.bodies.get(f"{method} {path}", {}))
        schema = _body_schema(operation)
        properties = schema.get("properties", {})
        # Fields of any JSON value (an answer's value, a run's payload) first: spoiling them reaches furthest
        fields = sorted(properties, key=lambda name: "type" in properties[name]) or list(base) or ["value"]
        shape = draw(st.sampled_from(["spoil", "spoil", "fields", "any", "bytes"]))
        if shape == "spoil" and base:
            base[draw(st.sampled_from(fields))] = draw(JSON_VALUES)
            body: Any = base
        elif shape == "fields":
            body = {name: draw(JSON_VALUES) for name in fields}
        else:
            body = draw(JSON_VALUES)
        if isinstance(body, dict) and "response_id" in body and isinstance(body["response_id"], str):
            body["response_id"] = f"{body['response_id']}-{uuid.uuid4().hex[:6]}"  # no accidental exact retry
        content = draw(st.binary(max_size=40)) if shape == "bytes" else encode(body).encode("ascii")
        headers["content-type"] = "application/json"
    return {"method": method, "url": url, "headers": headers, "content": content}


def _body_schema(operation: dict[str, Any]) -> dict[str, Any]:
    from api.app import app

    schema = operation["requestBody"]["content"].get("application/json", {}).get("schema", {})
    ref = schema.get("$ref")
    if ref:
        schema = app.openapi()["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return dict(schema)


@pytest.mark.parametrize("kind", [ADMIN, AGENT, HUMAN], ids=["admin", "agent", "human"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[f"{method} {path}" for method, path, _ in OPERATIONS])
def test_hypothesis__no_server_error_for_any_json(
    server: ApiServer, http: httpx.Client, world: World, kind: str, operation: tuple[str, str, dict[str, Any]]
) -> None:
    method, path, spec = operation
    logged = len(server.text())

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,  # the same examples every run: a failure reproduces, a pass means the same
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        request = _request(world, method, path, spec, data.draw)
        request["headers"] = {**request["headers"], **world.actors.auth(kind)}
        if path == "/v1/events/stream":  # endless by design: the status and headers are enough
            with http.stream(**request) as response:
                status = response.status_code
        else:
            status = http.request(**request).status_code
        shown = {k: v for k, v in request.items() if k != "headers"}  # never a token in the output
        assert status < 500, f"{status} for {shown}"

    one()
    assert "Traceback" not in server.text()[logged:], server.text()[logged:][-4000:]


def spared(http: httpx.Client, actors: Actors) -> str:
    """``PARKWAY_FUZZ_SPARED`` (tests/api/fuzz_hooks.py): the operations that would take a token or a grant
    from a principal the fuzz runs as, each with a spare principal or grant to aim at instead. The admin
    disabling itself stays in (a 409)."""
    admin = actors.auth(ADMIN)
    spare = http.post("/v1/principals", json={"kind": "human", "name": "fuzz-spare"}, headers=admin)
    assert spare.status_code == 201, spare.text
    grant = http.post("/v1/grants", json={"principal": "fuzz-spare", "target": "fuzz:spare"}, headers=admin)
    assert grant.status_code == 201, grant.text
    listed = http.get("/v1/principals", headers=admin)
    assert listed.status_code == 200, listed.text
    ids = {principal["name"]: principal["id"] for principal in listed.json()["items"]}
    runners = [ids[ADMIN], ids[AGENT], ids[HUMAN]]
    return json.dumps({
        "POST /v1/principals/{principal_id}/token": {"parameter": "principal_id", "keep": runners,
                                                     "spare": spare.json()["id"]},
        "DELETE /v1/principals/{principal_id}": {"parameter": "principal_id", "keep": runners[1:],
                                                 "spare": spare.json()["id"]},
        "DELETE /v1/grants/{grant_id}": {"parameter": "grant_id", "keep": [actors.grants[AGENT], actors.grants[HUMAN]],
                                         "spare": grant.json()["id"]},
    })  # fmt: skip


def schemathesis(
    server: ApiServer, token: str, *filters: str, phases: str, examples: int, log: Path, spared: str
) -> subprocess.Popen[str]:
    """Start the schemathesis CLI against the live server (``passed`` reads its outcome)."""
    executable = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    cmd = [
        executable, "run", f"{server.url}/openapi.json",
        "-H", f"Authorization: Bearer {token}",
        "--checks", "all",
        "--exclude-path", "/v1/events/stream",  # endless by design; read boundedly in test_http_e2e
        "--max-examples", str(examples), "--seed", "20240601", "--request-timeout", "20", "--workers", "1",
        # Not the coverage phase: its hundreds of boundary cases per kind took 30 s of make test's budget,
        # and the bad values that matter here (surrogates, NUL, non-finite numbers, depth) are what the
        # Hypothesis test above sends to every operation.
        "--phases", phases,
        # A POST /v1/runs body (a park's interactions, with the team options of issue 34) is the slowest to
        # generate: on a loaded machine Hypothesis's too_slow check failed the run (-n 3, after the merge of
        # h-teams). Generation speed says nothing of the server (the Hypothesis test above suppresses all).
        "--suppress-health-check", "too_slow",
        *filters,
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": HOOKS, "PYTHONPATH": str(ROOT), "PARKWAY_FUZZ_SPARED": spared}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)


def passed(run: subprocess.Popen[str], log: Path) -> int:
    """The number of test cases a schemathesis run passed; fails the test on any failure it reported."""
    run.wait(timeout=500)
    out = log.read_text()
    assert run.returncode == 0, out[-6000:]
    found = re.search(r"(\d+) generated, (\d+) passed", out)
    assert found, out[-2000:]
    return int(found.group(2))


def test_fuzz__no_server_error_and_every_response_as_documented(
    stack: Stack, server: ApiServer, http: httpx.Client, fuzz_actors: Actors
) -> None:
    logs, spare = stack.logs, spared(http, fuzz_actors)
    # The three kinds at once (each a process of its own), a few examples per operation. The stateful phase
    # runs where it follows links: the agent's (a run it made, then that run and its events) and the human's
    # (its interactions). The admin's, over every operation, followed none of its 71 inferred links in any run
    # looked at: its scenarios were unrelated requests, which its fuzzing phase sends to the same operations
    # with the same checks (the checks only a stateful phase has need a followed link).
    scopes = {ADMIN: ("admin", "examples,fuzzing", []),
              AGENT: ("agent", "examples,fuzzing,stateful", ["--include-path-regex", "^/v1/runs"]),
              HUMAN: ("human", "examples,fuzzing,stateful", ["--include-path-regex", "^/v1/interactions"])}  # fmt: skip
    runs = {
        name: (schemathesis(server, fuzz_actors.tokens[name], *scope, phases=phases, examples=10,
                            log=logs / f"fuzz-{kind}.log", spared=spare), logs / f"fuzz-{kind}.log")
        for name, (kind, phases, scope) in scopes.items()
    }  # fmt: skip
    cases = {name: passed(run, log) for name, (run, log) in runs.items()}
    print(f"\nschemathesis cases passed: {cases} total={sum(cases.values())}")
    assert all(n > 0 for n in cases.values())
    # The server is still healthy after the fuzzing, and never logged a traceback
    assert http.get("/healthz").status_code == 200
    # Each kind fuzzed as itself to the end: no run took its own or another's token away
    for name in scopes:
        assert http.get("/v1/runs", headers=fuzz_actors.auth(name)).status_code != 401, name
    assert "Traceback" not in server.text()
