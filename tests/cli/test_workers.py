"""``parkway workers`` (issue 30, item 4; issue 41, item 7): the live workers, one line each with its kind and
keys, then the versions work still needs with the grace left of each no live worker runs, or ``--json`` (the
body of ``GET /v1/workers``); run as a subprocess against the test database."""

from __future__ import annotations

import json
import re

from models import store
from parkway.db import transaction
from tests.api.conftest import drive
from tests.integration.helpers import advertise
from tests.support import Stack, pass_time, start, wait_parked


def test_workers__none_live_says_so_and_exits_0(stack: Stack) -> None:
    out = stack.parkway("workers")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no live worker", out.stdout
    as_json = stack.parkway("workers", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"items": [], "next": None, "versions": []}


def test_workers__lists_each_live_worker_with_its_keys_and_the_versions_waited_on(stack: Stack) -> None:
    # Given two live workers of different releases, one whose heartbeat ran out, and a run parked on t.one_done@1
    advertise("gone@host", continuations=("t.one_done@1",), ttl_s=5)
    pass_time(10)
    advertise("old@host", continuations=("t.one_done@1",), steps=("t.ask_one",))
    advertise("new@host", continuations=("t.finish@1", "t.one_done@2"), steps=("t.ask_one",))
    run_id = start("t.ask_one")
    drive(run_id)
    wait_parked(run_id, sweep=False)

    # When an operator lists them
    out = stack.parkway("workers")

    # Then one line per live worker, by node, its keys under it, then the version the run waits on
    assert out.returncode == 0, out.stderr
    heads = [line for line in out.stdout.splitlines() if " pid " in line]
    assert [head.split()[0] for head in heads] == ["new@host", "old@host"], out.stdout
    assert heads[0].endswith("1 step, 2 continuations") and heads[1].endswith("1 step, 1 continuation"), out.stdout
    assert "gone@host" not in out.stdout
    assert "  continuations: t.finish@1 t.one_done@2" in out.stdout and "  steps: t.ask_one" in out.stdout
    assert out.stdout.splitlines()[-2:] == ["versions work still needs:", "  t.one_done@1  1 parked, 0 due  served"]

    as_json = stack.parkway("workers", "--json")
    assert as_json.returncode == 0, as_json.stderr
    listing = json.loads(as_json.stdout)
    workers = {w["node"]: w for w in listing["items"]}
    assert set(workers) == {"new@host", "old@host"}
    assert workers["new@host"]["continuations"] == ["t.finish@1", "t.one_done@2"]
    assert workers["old@host"]["steps"] == ["t.ask_one"] and workers["old@host"]["heartbeat_at"].endswith("Z")
    assert listing["versions"] == [
        {"version": "t.one_done@1", "parked": 1, "due": 0, "served": True, "grace_left_s": None}
    ]


def test_workers__show_each_kind_and_the_grace_left_of_a_version_none_runs_or_that_it_is_paused(stack: Stack) -> None:
    # Given only a Celery worker that runs t.finish@1, a remote worker and a push handler (those before gone,
    # the last Celery worker that ran t.one_done@1 too), and a run parked on t.one_done@1, which none of them runs
    advertise("old@host", continuations=("t.one_done@1",))
    pass_time(3600)
    celery = advertise("c@host", continuations=("t.finish@1",))
    with transaction() as session:
        store.advertise(session, store.Advert(id=store.new_id(), node="agent-x", pid=0, steps=(),
                                              continuations=("w.remote@1",), ttl_s=60, remote=True))  # fmt: skip
        handler = store.create_handler(session, url="http://127.0.0.1:9/push", serves=["w.pushed"],
                                       secret_sealed="-", live_s=60).id  # fmt: skip
    run_id = start("t.ask_one")
    drive(run_id)
    wait_parked(run_id, sweep=False)

    # When an operator lists them (with a grace of 10 minutes)
    out = stack.parkway("workers", PARKWAY_VERSION_GRACE_S="600")

    # Then each line says the worker's kind and since when, and the version its waits and the grace left
    assert out.returncode == 0, out.stderr
    heads = {line.split()[0]: line for line in out.stdout.splitlines() if not line.startswith(" ")}
    assert heads["c@host"].startswith("c@host  celery pid 0  since "), out.stdout
    assert heads["agent-x"].startswith("agent-x  remote (HTTP worker protocol)  since "), out.stdout
    assert heads[f"push:{handler}"].startswith(f"push:{handler}  push handler  since "), out.stdout
    last = out.stdout.splitlines()[-1]
    # (within a second of the wait beginning, the faster CLI may still show the whole grace)
    assert re.fullmatch(
        r"  t\.one_done@1  \d parked, 0 due  no live worker runs it; grace (10m00s|9m[0-5]\ds) left", last
    ), last

    # And when the Celery fleet is down (its last worker stopped warmly), that grace is paused
    with transaction() as session:
        store.withdraw(session, celery)
    paused = stack.parkway("workers")
    assert paused.stdout.splitlines()[-1].endswith(
        "0 due  no live worker runs it; grace paused while its fleet is down"
    )
    listing = json.loads(stack.parkway("workers", "--json").stdout)
    assert {w["node"]: w["kind"] for w in listing["items"]} == {"agent-x": "remote", f"push:{handler}": "push"}
    assert listing["versions"][-1]["grace_left_s"] is None
