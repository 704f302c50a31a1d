"""Sweep categories 2, 4 and 5 driven by real processes, and the canonical terminal record."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import func, select, update

from models import projections
from models.base import utcnow
from models.tables import Continuation, Review, Run, ScheduleHistory
from parkway.db import transaction
from parkway.errors import Gone
from parkway.settings import reset_settings
from tasks.sdk import answer
from tests.acceptance.seeding import SharedWorker, shape, started_runs
from tests.support import (
    HUMAN,
    Stack,
    continuations,
    effects,
    event_types,
    new_response_id,
    run_row,
    start,
    wait_for,
    wait_parked,
    wait_status,
)

T = TypeVar("T")


def at_once(count: int, call: Callable[[], T]) -> list[T]:
    """``call()`` ``count`` times at the same time, each on a thread of its own (``stack.parkway``'s processes
    started together): the results in order."""
    with ThreadPoolExecutor(count) as pool:
        return [future.result() for future in [pool.submit(call) for _ in range(count)]]


@pytest.fixture(scope="module")
def module_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace directory of this module's shared worker (``workspace`` points this process at it)."""
    return tmp_path_factory.mktemp("truth") / "workspaces"


@pytest.fixture(scope="module")
def shared(stack: Stack, module_workspace: Path) -> SharedWorker:
    """The worker of the tests that need one and nothing more (one start, not one a test)."""
    return SharedWorker(stack, PARKWAY_WORKSPACE_DIR=str(module_workspace))


@pytest.fixture(autouse=True)
def tidy(shared: SharedWorker) -> Iterator[None]:
    """No worker or beat of a test outlives it (a leftover would take the next test's messages, or sweep)."""
    shared.tidy()
    yield
    shared.tidy()


@pytest.fixture
def workspace(module_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shared worker's workspace directory, emptied, for this process too (and the processes it starts).
    Emptied once every ended run is projected: the shared worker writes an earlier test's run a moment after
    it ends, which would otherwise land in the directory a test is about to replace."""
    wait_for(_written, what="earlier runs projected")
    if module_workspace.is_file():  # left unwritable by a test that failed
        module_workspace.unlink()
    shutil.rmtree(module_workspace, ignore_errors=True)
    module_workspace.mkdir(parents=True)
    monkeypatch.setenv("PARKWAY_WORKSPACE_DIR", str(module_workspace))
    reset_settings()
    yield module_workspace
    reset_settings()


def _written() -> bool:
    """No ended run's projection is left to write, but those whose write failed (a sweep's to retry)."""
    with transaction() as session:
        left = select(func.count()).select_from(Run).where(Run.projection_pending, ~Run.projection_failed)
        return not session.scalar(left)


def _projection(path: Path, run_id: str) -> dict[str, object]:
    return json.loads((path / run_id / "run_metadata.json").read_text())  # type: ignore[no-any-return]


def _history(run_id: str) -> ScheduleHistory | None:
    with transaction() as session:
        return session.get(ScheduleHistory, run_id)


def _history_agrees(run_id: str, run: Run) -> None:
    history = _history(run_id)
    assert history is not None
    assert (history.status, history.completed_at, history.execution_id) == (
        run.status,
        run.completed_at,
        run.finished_by,
    )


def _agree(path: Path, run_id: str) -> None:
    run = run_row(run_id)
    assert run.completed_at is not None and not run.projection_pending
    file = _projection(path, run_id)
    assert (file["status"], file["completed_at"], file["execution_id"]) == (
        run.status,
        run.completed_at.isoformat(),
        run.finished_by,
    )
    _history_agrees(run_id, run)


# The module's first test: it stops every worker, so the shared one is started once, after it.
@pytest.mark.broker
def test_stranded_review__interrupted_by_the_sweep_with_counts_kept(
    stack: Stack, shared: SharedWorker, tmp_path: Path
) -> None:
    # Given a step that started a review and recorded progress, killed while it runs (on a worker of its own)
    flag = tmp_path / "go-on"
    stack.stop_all()
    worker = stack.start_worker()
    run_id = start("t.review", {"wait_for": str(flag)})

    def started() -> list[Review]:
        with transaction() as session:
            rows = session.scalars(select(Review).where(Review.run_id == run_id)).all()
            return [r for r in rows if r.finding_count == 3]

    [first] = wait_for(started, what="review in progress")
    worker.kill()

    # When the sweep finds its owner gone (lease expired), with no worker to re-run the step yet
    def interrupted() -> Review | None:
        with transaction() as session:
            row = session.get_one(Review, first.id)
            return row if row.status == "interrupted" else None

    review = wait_for(interrupted, sweep=True, what="stranded review interrupted")
    # Then only status, verdict and reason changed, and the reason names the evidence
    assert (review.finding_count, review.verification_count) == (3, 2)
    assert review.verdict == "incomplete" and review.kind == "lint"
    assert review.reason is not None and first.execution_id in review.reason
    assert "3 findings and 2 verifications" in review.reason
    assert "review.interrupted" in event_types(run_id)
    # And the step, re-driven, completes with a review of its own
    flag.touch()
    shared.worker()
    assert wait_status(run_id, "completed").result != {"review": first.id}
    assert effects(run_id, "review") == 1


@pytest.mark.broker
def test_expiry__continuation_runs_once_with_the_expired_outcome(stack: Stack, shared: SharedWorker) -> None:
    shared.worker()
    stack.start_beat()
    run_id = start("t.ask_one", {"continuation": "t.expiry_done@1", "expires_in": 1})
    asked = wait_parked(run_id, sweep=False)
    # When nobody answers within a second, the beat-driven sweep expires the question
    run = wait_status(run_id, "completed", sweep=False)
    assert run.result == {"status": "expired", "value": None}
    # Then a late answer learns it expired, and stays so
    with pytest.raises(Gone) as late:
        answer(asked["go"].id, "too late", response_id=new_response_id(), principal=HUMAN)
    assert late.value.state is not None and late.value.state["status"] == "expired"
    assert effects(run_id, "expiry_done") == 1
    assert [(c.kind, c.status, c.attempts) for c in continuations(run_id)] == [
        ("start", "consumed", 1),
        ("resume", "consumed", 1),
    ]
    assert event_types(run_id).count("interaction.expired") == 1


def test_running_review__step_cannot_complete(shared: SharedWorker) -> None:
    shared.worker()
    run_id = start("t.review", {"leave_running": True})
    run = wait_status(run_id, "failed")
    assert run.error is not None and run.error.startswith("partial failure:")
    assert "still running" in run.error
    assert effects(run_id, "review") == 0  # the Complete did not commit its effects


def test_projection_write_fails__pending_until_the_sweep_converges(
    stack: Stack, shared: SharedWorker, workspace: Path
) -> None:
    # Given a workspace that cannot be written (root ignores permission bits: a file stands in its place)
    shutil.rmtree(workspace)
    workspace.write_text("not a directory")
    shared.worker()
    run_id = start("t.ask_one")
    asked = wait_parked(run_id, sweep=False)
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    run = wait_status(run_id, "completed", sweep=False)
    # Then the canonical record is written, the projections are pending, and nothing contradicts it
    assert run.projection_pending
    # (the schedule-history row is a view of the terminal record itself, migration 0028: it agrees from the start)
    _history_agrees(run_id, run)
    # And a sweep once the worker's own failed write is counted and its back-off has passed tries again, fails,
    # and counts it (waited for: the worker writes after the run commits, and a sweep that starts within the
    # back-off skips the run, one that starts after it tries)
    wait_for(lambda: _worker_tried(run_id) and _projection_due(run_id), timeout=10,
             what="the worker's failed projection counted and its back-off passed")  # fmt: skip
    tried = run_row(run_id).projection_attempts
    result = stack.parkway("sweep", "--once", PARKWAY_WORKSPACE_DIR=str(workspace))
    assert result.returncode == 0, result.stderr
    assert run_row(run_id).projection_pending and run_row(run_id).projection_attempts == tried + 1
    # When the workspace is writable again, the next sweep after the failed write's back-off converges it
    workspace.unlink()
    workspace.mkdir()
    wait_for(lambda: _projection_due(run_id), timeout=10, what="the failed projection's back-off to pass")
    result = stack.parkway("sweep", "--once", "--json", PARKWAY_WORKSPACE_DIR=str(workspace))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["projections"] >= 1  # stdout is the JSON report alone
    _agree(workspace, run_id)
    assert run_row(run_id).completed_at == run.completed_at


def _worker_tried(run_id: str) -> bool:
    return run_row(run_id).projection_attempts >= 1


def _projection_due(run_id: str) -> bool:
    with transaction() as session:
        return run_id in projections.pending_projections(session, batch=1000)


@pytest.mark.broker
def test_completed_run__survives_sigkill_of_everything_and_two_sweeps(
    stack: Stack, shared: SharedWorker, workspace: Path
) -> None:
    worker = shared.worker()
    beat = stack.start_beat()
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    done = wait_status(run_id, "completed")
    wait_for(lambda: not run_row(run_id).projection_pending, what="projections written")
    worker.kill()
    beat.kill()
    shared.worker()
    sweeps = at_once(2, lambda: stack.parkway("sweep", "--once"))
    assert [p.returncode for p in sweeps] == [0, 0], [p.stderr for p in sweeps]
    again = run_row(run_id)
    assert (again.status, again.completed_at, again.finished_by) == ("completed", done.completed_at, done.finished_by)
    _agree(workspace, run_id)
    assert event_types(run_id).count("run.completed") == 1
    assert "run.interrupted" not in event_types(run_id)


@pytest.mark.broker
def test_two_sweeps_at_once__each_due_row_republished_exactly_once(stack: Stack) -> None:
    # Given 1,000 ready continuations whose messages were lost (no worker runs): one run started as an agent
    # starts it, and 999 made as it was by the store's own statement at once (the start is not under test here)
    stack.stop_all()
    started = start("t.ask_one")
    seeded = [run_id for run_id, _ in started_runs(999, "t.ask_one")]
    assert shape(seeded[0]) == shape(started)
    run_ids = [started, *seeded]
    stack.flush_broker()
    with transaction() as session:  # what a minute-old crash leaves: published long ago, message lost
        session.execute(
            update(Continuation)
            .where(Continuation.run_id.in_(run_ids))
            .values(enqueued_at=utcnow() - timedelta(seconds=60))
        )
    # When two sweep processes run at the same time
    sweeps = at_once(
        2, lambda: stack.parkway("sweep", "--once", "--json", "--batch", "1000", timeout=120,
                                 PARKWAY_REENQUEUE_AFTER_S="30")
    )  # fmt: skip
    assert [p.returncode for p in sweeps] == [0, 0], [(p.stdout, p.stderr) for p in sweeps]
    reports = [json.loads(p.stdout) for p in sweeps]
    # Then every row was republished once: by one sweep or the other, never both
    assert sum(r["republished"] for r in reports) >= 1000
    ours = set(run_ids)
    with transaction() as session:
        rows = session.scalars(select(Continuation).where(Continuation.run_id.in_(ours))).all()
    assert len(rows) == 1000
    assert {c.publishes for c in rows} == {2}  # one publish at creation, exactly one by a sweep
    stack.flush_broker()
