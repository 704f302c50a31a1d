"""``parkway workers`` (issue 30, item 4): the live workers, one line each with its keys, then the versions work
still needs, or ``--json`` (the body of ``GET /v1/workers``); run as a subprocess against the test database."""

from __future__ import annotations

import json

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
    assert listing["versions"] == [{"version": "t.one_done@1", "parked": 1, "due": 0, "served": True}]
