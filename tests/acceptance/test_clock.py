"""One clock, the database's (issue 17 §6): a worker whose host clock is ten minutes off, under
``faketime``, hands out leases that neither expire early nor outlive their time, and its runs' events keep
their order."""

from __future__ import annotations

import os
import signal
import sysconfig
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from beat.sweep import run_sweep
from models.tables import Continuation, Event, Review
from parkway.db import transaction
from parkway.settings import get_settings
from tests.acceptance.clock_workflows import HANG
from tests.integration.helpers import parked
from tests.support import (
    AGENT,
    HUMAN,
    TARGET,
    Stack,
    Worker,
    continuations,
    pass_time,
    settings_env,
    start,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.usefixtures("own_workers")

LIBFAKETIME = Path(f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}/faketime/libfaketime.so.1")
SKEW_S = 600.0


def _skewed(offset: str) -> dict[str, str]:
    """Env that runs a process (and its forked pool children) with its wall clock ``offset`` from true
    time, importing this test's workflow too. The monotonic clock is left alone: it only measures
    intervals, and faked it makes every timed wait of a thread (a lock's ``sem_clockwait``) hang. Left
    alone, ``time.sleep`` fails with EINVAL in such a process (libfaketime 0.9.10's ``clock_nanosleep``):
    the worker's projector thread dies on it, its runs' projections are left to the sweep."""
    assert LIBFAKETIME.exists(), "faketime is not installed (apt-get install faketime; .ci/run does)"
    imports = f"{os.environ.get('PARKWAY_IMPORTS', 'tests.workflows')},tests.acceptance.clock_workflows"
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1", "PARKWAY_IMPORTS": imports}


def _host_clock_offset(stack: Stack, env: dict[str, str]) -> float:
    """How far ahead of this process a process started with ``env`` sees time.time() and datetime.now()."""
    code = "import time, datetime; print(time.time(), datetime.datetime.now(datetime.UTC).timestamp())"
    before = datetime.now().timestamp()
    done = stack.run_python(code, **env)
    assert done.returncode == 0, done.stderr
    seen = [float(v) for v in done.stdout.split()]
    return min(seen) - before


def _db_now() -> datetime:
    with transaction() as session:
        return session.scalar(select(func.now()))  # type: ignore[no-any-return]


def _claimed(run_id: str) -> Continuation | None:
    rows = [c for c in continuations(run_id) if c.status == "claimed"]
    return rows[0] if rows else None


def _review_running(run_id: str) -> Review | None:
    with transaction() as session:
        return session.scalar(select(Review).where(Review.run_id == run_id, Review.status == "running"))


def _hanging_body(stack: Stack, tmp_path: Path, worker: Worker) -> tuple[str, Path, Continuation]:
    """A run whose body (first attempt) waits for a flag file, claimed by ``worker``."""
    flag = tmp_path / "go"
    run_id = start(HANG, {"flag": str(flag)})
    wait_for(lambda: _review_running(run_id), timeout=60, what="the body to start and wait")
    claimed = _claimed(run_id)
    assert claimed is not None and worker.alive()
    return run_id, flag, claimed


def _assert_lease_on_db_clock(claimed: Continuation) -> None:
    """The lease ends within PARKWAY_CLAIM_LEASE_S of the database's clock: not before now (it would
    expire early), not after now + the lease (it would outlive its time)."""
    lease_s = get_settings().claim_lease_s
    with transaction() as session:
        lease = session.scalar(select(Continuation.lease_expires_at).where(Continuation.id == claimed.id))
    now = _db_now()
    assert lease is not None
    assert now < lease, f"the lease ended {(now - lease).total_seconds():.1f}s ago by the database's clock"
    ahead = (lease - now).total_seconds()
    assert ahead <= lease_s + 0.01, f"the lease ends {ahead:.1f}s from now, beyond PARKWAY_CLAIM_LEASE_S={lease_s}"


REVIEW = ["review.started", "review.completed"]
LIFECYCLE = {"run.created", "continuation.ready", "review.interrupted", *REVIEW, "step.completed", "run.completed"}


def _lifecycle(run_id: str) -> list[str]:
    """The run's lifecycle events in ``seq`` order, as every reader is served them (other types left out)."""
    with transaction() as session:
        types = session.scalars(select(Event.type).where(Event.run_id == run_id).order_by(Event.seq))
        return [t for t in types if t in LIFECYCLE]


def test_clock__a_worker_ten_minutes_ahead_holds_a_lease_of_database_time(stack: Stack, tmp_path: Path) -> None:
    # Given a worker whose host clock is ten minutes ahead (checked: Python in it sees that)
    env = _skewed(f"+{SKEW_S:.0f}s")
    assert _host_clock_offset(stack, env) > SKEW_S - 60
    worker = stack.start_worker(concurrency=1, **env)

    # When it claims a run and its body is running
    run_id, flag, claimed = _hanging_body(stack, tmp_path, worker)
    review = _review_running(run_id)
    assert review is not None and (review.created_at - _db_now()).total_seconds() > SKEW_S - 60  # its clock is off

    # Then its lease is database time + the lease, and a sweep does not see it expired
    _assert_lease_on_db_clock(claimed)
    assert run_sweep().counts["lease_expired"] == 0
    assert _claimed(run_id) is not None and _claimed(run_id).claimed_by == claimed.claimed_by  # type: ignore[union-attr]

    # And once the body goes on, the run completes in that one execution, its events in order
    flag.touch()
    run = wait_status(run_id, "completed", timeout=60, sweep=False)
    assert run.finished_by == claimed.claimed_by
    assert _lifecycle(run_id) == ["run.created", "continuation.ready", *REVIEW, "step.completed", "run.completed"]


def test_clock__a_hung_worker_ten_minutes_behind_loses_its_lease_after_the_lease_of_database_time(
    stack: Stack, tmp_path: Path
) -> None:
    # Given a worker whose host clock is ten minutes behind (checked: Python in it sees that)
    env = _skewed(f"-{SKEW_S:.0f}s")
    assert _host_clock_offset(stack, env) < -(SKEW_S - 60)
    behind = stack.start_worker(concurrency=1, **env)

    # When it claims a run and its body is running, its lease is of database time: a sweep leaves it alone
    run_id, _flag, claimed = _hanging_body(stack, tmp_path, behind)
    _assert_lease_on_db_clock(claimed)
    assert run_sweep().counts["lease_expired"] == 0
    assert _claimed(run_id) is not None and _claimed(run_id).claimed_by == claimed.claimed_by  # type: ignore[union-attr]

    # When the worker hangs (stopped, lease renewals and all) and another worker is up
    other = stack.start_worker(concurrency=1, PARKWAY_IMPORTS=env["PARKWAY_IMPORTS"])
    os.killpg(behind.proc.pid, signal.SIGSTOP)
    try:
        # Then once its lease ran out by the database's clock, the sweep re-drives it on the other worker
        run = wait_status(run_id, "completed", timeout=60, sweep=True)
    finally:
        behind.kill()
    assert run.finished_by not in (None, claimed.claimed_by)
    assert other.alive()
    (start_continuation,) = [c for c in continuations(run_id) if c.kind == "start"]
    assert start_continuation.attempts == 2

    # And the run's events are in order: the re-drive's after the hung execution's
    assert _lifecycle(run_id) == [
        "run.created",
        "continuation.ready",
        "review.started",
        "review.interrupted",  # the hung execution's review, ended by the one that re-drove it
        *REVIEW,
        "step.completed",
        "run.completed",
    ]


ANSWER_CODE = """
from tasks.sdk import Gone, answer
try:
    print(answer({iid!r}, "yes", response_id="r-skewed", principal={human!r})["status"])
except Gone as gone:
    print("gone", gone.state["status"])
"""


@pytest.mark.parametrize(
    ("offset", "expires_in", "outcome"),
    [
        (f"+{SKEW_S:.0f}s", 120, "answered"),  # due in 2 minutes: its host thinks 8 minutes ago
        (f"-{SKEW_S:.0f}s", 1, "gone expired"),  # past by the database's clock: its host thinks not for 10 minutes
    ],
)
def test_clock__an_answer_from_a_host_whose_clock_is_off_meets_the_database_s_deadline(
    stack: Stack, offset: str, expires_in: int, outcome: str
) -> None:
    # Given a question with a deadline (expires_at computed by the database at park time)
    _, asked = parked("t.ask_one", {"expires_in": expires_in})
    go, deadline = asked["go"], asked["go"].expires_at
    assert deadline is not None
    if expires_in == 1:
        wait_for(lambda: _db_now() > deadline, timeout=10, what="the deadline to pass by the database's clock")

    # When a process whose clock is ten minutes off answers it
    done = stack.run_python(ANSWER_CODE.format(iid=go.id, human=HUMAN), **_skewed(offset))

    # Then the deadline is the database's: open until expires_at, closed after, whatever that host's clock says
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == outcome


START_CODE = """
import tests.workflows
from tasks.sdk import start_run
print(start_run("t.after", {{}}, principal={agent!r}, target={target!r}))
"""


@pytest.fixture
def slow_reenqueue(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """This process's sweep republishes after 60 s (not the suite's 1 s): "at once" is then well before it."""
    with settings_env(monkeypatch, PARKWAY_REENQUEUE_AFTER_S="60"):
        yield 60.0


def _publishes(continuation_id: str) -> int:
    with transaction() as session:
        return session.get_one(Continuation, continuation_id).publishes


@pytest.mark.parametrize("offset", [f"+{SKEW_S:.0f}s", f"-{SKEW_S:.0f}s"])
def test_clock__a_run_started_on_a_host_whose_clock_is_off_is_republished_by_the_database_s_age(
    stack: Stack, offset: str, slow_reenqueue: float
) -> None:
    # Given a run started (its message published, no worker up) by a process ten minutes off
    done = stack.run_python(START_CODE.format(agent=AGENT, target=TARGET), **_skewed(offset))
    assert done.returncode == 0, done.stderr
    (ready,) = continuations(done.stdout.strip())
    stack.flush_broker()  # and its message lost: only its age decides whether the sweep sends it again

    # When a sweep runs at once, then after the re-enqueue delay of database time has passed
    run_sweep()
    at_once = _publishes(ready.id)
    pass_time(slow_reenqueue + 1)
    run_sweep()

    # Then it was left alone at first (ten minutes behind would have stamped it as sent ten minutes ago)
    # and published again after the delay (ten minutes ahead would have stamped it as sent in ten minutes)
    assert (at_once, _publishes(ready.id)) == (1, 2)
