"""Rolling deploys with real workers of two releases (``tests.release_a``, ``tests.release_b``): a wait
fails closed only on a version no live worker has advertised for the grace, never because of the registry
of the process that sweeps, and a worker that does not run a version hands the work on."""

from __future__ import annotations

import random
import re

import pytest

import tests.release_a
import tests.release_b
from models import store
from parkway.db import transaction
from tasks.sdk import answer
from tests.support import (
    HUMAN,
    Stack,
    Worker,
    continuations,
    effects,
    event_types,
    interactions,
    new_response_id,
    run_row,
    start,
    sweeps_done,
    wait_for,
    wait_parked,
    wait_status,
)

pytestmark = [pytest.mark.usefixtures("own_workers"), pytest.mark.broker]  # hand-on routes by queue
assert tests.release_a


def _release(stack: Stack, name: str, **env: str) -> Worker:
    """A worker of release ``name``: it imports that release's workflows only."""
    return stack.start_worker(PARKWAY_IMPORTS=f"tests.release_{name}", **env)


def _pending(run_id: str) -> bool:
    return run_row(run_id).status == "waiting" and interactions(run_id)["go"].status == "pending"


def _answer(run_id: str) -> None:
    answer(interactions(run_id)["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)


HANDED_ON = re.compile(r"(start|resume) (\S+) is not run here: handed on to (\S+)")


def other_name(release: str) -> str:
    return "b" if release == "a" else "a"


def _live_nodes() -> list[str]:
    with transaction() as session:
        return [w.node for w in store.live_workers(session)]


def test_sweeps_from_processes_without_the_module__leave_the_wait_to_the_worker_that_has_it(stack: Stack) -> None:
    # Given a run of release A parked on a.done@1, served by a live worker of release A
    _release(stack, "a")
    run_id = start("a.ask")
    wait_parked(run_id, sweep=False)

    # When an operator's shell without the module sweeps (PARKWAY_IMPORTS unset: the shipped examples), and a
    # worker of release B starts (its startup sweep runs) and B's own process sweeps
    shell = stack.parkway("sweep", "--once", PARKWAY_IMPORTS=None)
    assert shell.returncode == 0, shell.stderr
    passes = sweeps_done()
    _release(stack, "b")
    # (B's startup sweep runs on whichever worker takes it)
    wait_for(lambda: sweeps_done() > passes, timeout=30, what="B's startup sweep")
    from_b = stack.parkway("sweep", "--once", PARKWAY_IMPORTS="tests.release_b")
    assert from_b.returncode == 0, from_b.stderr

    # Then the wait is still pending
    assert _pending(run_id), (run_row(run_id).status, run_row(run_id).reason)

    # And answered, it completes on the worker that has its version, once
    _answer(run_id)
    wait_status(run_id, "completed")
    assert effects(run_id, "a.done") == 1


def test_a_mixed_fleet__every_wait_resumes_on_a_worker_that_has_its_version_none_interrupted(stack: Stack) -> None:
    # Given workers of releases A and B on the same queues (and no other: an earlier test's, killed, stays live
    # until its last heartbeat's ttl, and a delivery handed on to it would wait for the sweep), and runs of both
    # releases' workflows
    wait_for(lambda: not _live_nodes(), timeout=30, what="no live worker")
    a, b = _release(stack, "a"), _release(stack, "b")
    runs = {run_id: name for name in "ab" for run_id in (start(f"{name}.ask") for _ in range(6))}
    for run_id in runs:
        wait_parked(run_id)

    # When they are answered in random order
    order = list(runs)
    random.shuffle(order)
    for run_id in order:
        _answer(run_id)

    # Then every run completes, none interrupted, each continuation ran once on a worker of its release
    # and spent one attempt (a worker that handed it on spent none)
    for run_id, name in runs.items():
        assert wait_status(run_id, "completed").result == {"go": "yes"}
        assert effects(run_id, f"{name}.done") == 1
        assert [(c.kind, c.status, c.attempts) for c in continuations(run_id)] == [
            ("start", "consumed", 1),
            ("resume", "consumed", 1),
        ]
        assert "run.interrupted" not in event_types(run_id)
    # And every delivery a worker of the other release took was handed on at once to a worker of the release
    # that runs it (none left for the sweep: both were live), by that worker, and never back
    handed = {name: HANDED_ON.findall(w.text()) for name, w in (("a", a), ("b", b))}
    for name, lines in handed.items():
        other = b if name == "a" else a
        assert all(key.startswith(f"{other_name(name)}.") and to.startswith(f"{other.name}@") for _, key, to in lines)
    assert len(handed["a"]) + len(handed["b"]) <= 2 * len(runs)
    assert "left for the sweep" not in a.text() + b.text()


def test_a_version_no_live_worker_runs__waits_with_no_worker_and_within_the_grace__fails_closed_after(
    stack: Stack,
) -> None:
    # Given a run of release A parked on a.done@1, and its only worker (live for minutes after each heartbeat,
    # so only its withdrawal ends it here) stopped warmly
    a = _release(stack, "a", PARKWAY_WORKER_HEARTBEAT_S="60")
    run_id = start("a.ask")
    wait_parked(run_id, sweep=False)
    assert a.terminate() == 0
    assert not [node for node in _live_nodes() if node.startswith(f"{a.name}@")]  # withdrawn on a warm stop
    wait_for(lambda: not _live_nodes(), timeout=30, what="no live worker")  # (others killed before: their ttl)

    # When a sweep runs with no worker alive at all, even with no grace: the work waits
    assert stack.parkway("sweep", "--once", PARKWAY_VERSION_GRACE_S="0").returncode == 0
    assert _pending(run_id)

    # When a worker of release B is live, a sweep within the grace leaves the wait pending
    _release(stack, "b", PARKWAY_VERSION_GRACE_S="3600")
    assert stack.parkway("sweep", "--once", PARKWAY_VERSION_GRACE_S="3600").returncode == 0
    assert _pending(run_id)

    # And once the grace has passed, the wait fails closed, naming the version and since when
    assert stack.parkway("sweep", "--once", PARKWAY_VERSION_GRACE_S="0").returncode == 0
    run = run_row(run_id)
    assert run.status == "interrupted", run.reason
    assert (run.reason or "").startswith("continuation version a.done@1: no live worker has advertised it since ")
    assert interactions(run_id)["go"].status == "interrupted"
    assert effects(run_id) == 0
