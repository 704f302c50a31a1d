"""Quorum waits on real worker processes (docs/teams.md): many people answer at once, one decision, the
step resumed exactly once, across a worker's SIGKILL and an API restart; escalation levels and expiry after
the last one; reminders and levels on the database's clock whatever the worker's; the park-time checks of
who could ever answer, and of what the run's owner may address."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import select

import tests.team_workflows  # noqa: F401  (start() checks the workflow is registered in this process too)
from beat.sweep import run_sweep
from models import store
from models.tables import Interaction, Step
from parkway.db import transaction
from parkway.errors import Conflict, Forbidden, Gone, InvalidOutcome
from parkway.tokens import hash_token, new_token
from tasks.celery_app import SWEEP, SWEEP_QUEUE, app
from tasks.sdk import Park, Permission, answer, start_run
from tests.acceptance.test_clock import _skewed
from tests.api.conftest import ApiServer
from tests.support import (
    AGENT,
    TARGET,
    Stack,
    Worker,
    continuations,
    event_types,
    pass_time,
    run_row,
    run_status,
    start,
    sweeps_done,
    wait_for,
    wait_parked,
    wait_status,
)

WORKFLOWS = "tests.workflows,tests.team_workflows"
YES, NO = {"approved": True}, {"approved": False}

pytestmark = pytest.mark.usefixtures("own_workers")


@pytest.fixture
def worker(stack: Stack) -> Worker:
    return stack.start_worker(PARKWAY_IMPORTS=WORKFLOWS)


def granted_people(count: int, target: str = TARGET, *, granted: bool = True) -> dict[str, str]:
    """``count`` new humans granted on ``target`` (unless not): their bearer tokens by name."""
    tokens = {f"tq-{uuid.uuid4().hex[:8]}": new_token() for _ in range(count)}
    with transaction() as session:
        for name, token in tokens.items():
            made = store.create_principal(session, kind="human", name=name, token_hash=hash_token(token))
            assert made is not None
            if granted:
                store.create_grant(session, principal_id=made.id, target=target)
    return tokens


def addressable(prefix: str) -> str:
    """A new target the suite's agent is granted on: a run's waits address only targets its owner holds."""
    target = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with transaction() as session:
        agent = store.principal_by_name(session, AGENT)
        assert agent is not None
        store.create_grant(session, principal_id=agent.id, target=target)
    return target


def wait_row(iid: str) -> Interaction:
    with transaction() as session:
        found = session.get(Interaction, iid)
        assert found is not None
        session.expunge(found)
        return found


def test_quorum__twenty_people_answer_a_quorum_3_permission_at_once_one_decision_one_resume(
    stack: Stack, worker: Worker
) -> None:
    # Given a permission that needs 3 approvals, parked by a real worker, and 20 people granted on its target
    people = list(granted_people(20))
    run_id = start("teams.approve", {"target": TARGET, "quorum": 3})
    iid = wait_parked(run_id)["deploy"].id

    # When all 20 approve at the same moment
    barrier = threading.Barrier(len(people))

    def approve(name: str) -> str:
        barrier.wait()
        try:
            return str(answer(iid, YES, response_id=f"r-{name}", principal=name)["status"])
        except Conflict as conflict:
            return f"409 {conflict.detail}"

    with ThreadPoolExecutor(max_workers=len(people)) as pool:
        outcomes = list(pool.map(approve, people))

    # Then two responses were recorded, one decided, and every later one got 409 naming that decision
    counted = Counter(o if not o.startswith("409") else "409" for o in outcomes)
    assert counted == {"pending": 2, "answered": 1, "409": 17}, outcomes
    decider = people[outcomes.index("answered")]
    assert all(f"already answered by {decider}" in o for o in outcomes if o.startswith("409"))
    # And the worker resumed the step exactly once, seeing the three responses
    run = wait_status(run_id, "completed")
    assert run.result["answered_by"] == decider and len(run.result["responses"]) == 3
    assert [c.kind for c in continuations(run_id)] == ["start", "resume"]
    assert event_types(run_id).count("step.resumed") == 1


def _post_across_a_restart(
    api: ApiServer, path: str, token: str, body: Any, back: threading.Event | None = None
) -> httpx.Response:
    """POST ``body``; when the API is down, sent once more (the same ``response_id``: an exact retry) when
    ``back`` says it is up again. Twenty threads polling the port themselves would starve its start on two cores."""
    for retry in (False, True):
        try:
            return httpx.post(f"{api.url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        except httpx.TransportError:
            if retry or back is None or not back.wait(timeout=120):
                raise
    raise AssertionError("unreachable")


def test_quorum__twenty_at_once_under_a_worker_sigkill_and_an_api_restart__one_decision_one_resume(
    stack: Stack, worker: Worker
) -> None:
    # Given a quorum-3 permission parked by a real worker, 20 people on its target, a real API
    tokens = granted_people(20)
    people = list(tokens)
    run_id = start("teams.approve", {"target": TARGET, "quorum": 3})
    iid = wait_parked(run_id)["deploy"].id
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn-teams.log").start()
    try:
        # When all 20 approve over HTTP at the same moment, as the worker is SIGKILLed and the API restarted
        barrier, back = threading.Barrier(len(people) + 1), threading.Event()

        def approve(name: str) -> httpx.Response:
            barrier.wait()
            body = {"response_id": f"r-{name}", "value": YES}
            return _post_across_a_restart(api, f"/v1/interactions/{iid}/answer", tokens[name], body, back)

        with ThreadPoolExecutor(max_workers=len(people)) as pool:
            sent = [pool.submit(approve, name) for name in people]
            barrier.wait()
            worker.kill()
            try:
                api.restart()
            finally:
                back.set()
            replies = [s.result() for s in sent]

        # Then two responses were recorded, one decided, every later one 409 naming that decision
        outcomes = [r.json()["status"] if r.status_code == 200 else r.status_code for r in replies]
        assert Counter(outcomes) == {"pending": 2, "answered": 1, 409: 17}, [r.text for r in replies]
        decider = people[outcomes.index("answered")]
        refused = [r.json() for r in replies if r.status_code == 409]
        assert all(f"already answered by {decider}" in r["detail"] for r in refused)
        assert all(r["state"]["answered_by"] == decider for r in refused)

        # And a new worker resumes the step exactly once, seeing the three responses
        stack.start_worker(PARKWAY_IMPORTS=WORKFLOWS)
        run = wait_status(run_id, "completed", timeout=60)
        assert run.result["answered_by"] == decider and len(run.result["responses"]) == 3
        assert [(c.kind, c.status) for c in continuations(run_id)] == [("start", "consumed"), ("resume", "consumed")]
        assert event_types(run_id).count("step.resumed") == 1
        # A response after it all, after another restart: 409 naming the decision; a retry its receipt again
        api.restart()
        latecomer = next(name for name, outcome in zip(people, outcomes, strict=True) if outcome == 409)
        late = _post_across_a_restart(api, f"/v1/interactions/{iid}/answer", tokens[latecomer],
                                    {"response_id": "late", "value": NO})  # fmt: skip
        assert late.status_code == 409 and f"already answered by {decider}" in late.json()["detail"], late.text
        again = _post_across_a_restart(api, f"/v1/interactions/{iid}/answer", tokens[decider],
                                     {"response_id": f"r-{decider}", "value": YES})  # fmt: skip
        assert (again.status_code, again.json().get("status")) == (200, "answered"), again.text
    finally:
        api.stop()


def test_escalation__answered_at_the_level_reached__recorded_with_it(stack: Stack, worker: Worker) -> None:
    # Given a wait only ana may answer, escalating to bo by name at 300s
    ana, bo = granted_people(2, granted=False)
    run_id = start("teams.approve", {"target": TARGET, "assignees": [ana], "assignees_only": True,
                                     "escalate": [[300, [bo]]], "expires_in": 3600})  # fmt: skip
    iid = wait_parked(run_id)["deploy"].id
    with pytest.raises(Forbidden, match="not named"):  # by name, in process (the SDK), as over HTTP
        answer(iid, YES, response_id="early", principal=bo)

    # When the level is reached, and bo answers
    pass_time(301)
    run_sweep()
    assert answer(iid, YES, response_id="bo", principal=bo)["status"] == "answered"

    # Then the decision records the level it came at, and the real worker resumed with it, once
    run = wait_status(run_id, "completed")
    assert (wait_row(iid).answered_level, run.result["answered_by"]) == (1, bo)
    assert [r["level"] for r in run.result["responses"]] == [1]
    assert event_types(run_id).count("step.resumed") == 1


def test_escalation__expires_after_the_last_level_and_the_step_resumes_with_expired(
    stack: Stack, worker: Worker
) -> None:
    # Given a wait escalating to bo at 60s and to a team (no one on it) at 120s, expiring at 180s
    ana, bo = granted_people(2, granted=False)
    empty = addressable("team:empty")
    run_id = start("teams.approve", {"target": TARGET, "assignees": [ana], "assignees_only": True,
                                     "escalate": [[60, [bo]], [120, empty]], "expires_in": 180})  # fmt: skip
    iid = wait_parked(run_id)["deploy"].id

    # When each level's time passes: each level is reached in turn, and the wait stays pending
    for level in (1, 2):
        pass_time(61)
        run_sweep()
        assert (wait_row(iid).level, wait_row(iid).status) == (level, "pending")
    # When the expiry passes too, nobody having answered
    pass_time(61)
    run_sweep()

    # Then the wait expired after its last level, and the step resumed once with that outcome
    run = wait_status(run_id, "completed")
    assert run.result["status"] == "expired" and run.result["answered_by"] is None
    types = [t for t in event_types(run_id) if t.startswith("interaction.")]
    assert types == ["interaction.asked", "interaction.escalated", "interaction.escalated", "interaction.expired"]
    with pytest.raises(Gone):
        answer(iid, YES, response_id="late", principal=bo)


def _sweep_in(worker: Worker) -> None:
    """One sweep pass run by ``worker`` (the only one consuming): sent, and waited for in the sweep's totals."""
    done = sweeps_done()
    app.send_task(SWEEP, queue=SWEEP_QUEUE)
    wait_for(lambda: sweeps_done() > done, timeout=30, what="a sweep pass of the worker")


def test_timers__a_worker_ten_minutes_ahead_writes_reminders_and_levels_by_the_database_clock(
    stack: Stack,
) -> None:
    # Given a worker whose clock is ten minutes ahead parks a wait reminding at 300s, escalating at 900s
    skewed = stack.start_worker(concurrency=1, **{**_skewed("+600s"), "PARKWAY_IMPORTS": WORKFLOWS})
    (bo,) = granted_people(1, granted=False)
    run_id = start("teams.approve", {"target": TARGET, "remind_after": [300], "escalate": [[900, [bo]]],
                                     "expires_in": 3600})  # fmt: skip
    iid = wait_parked(run_id, sweep=False)["deploy"].id

    # When it sweeps at once: by its clock the reminder is 300s late, by the database's not due
    _sweep_in(skewed)
    assert (wait_row(iid).reminders, wait_row(iid).level) == (0, 0)
    # When 301s of the database's clock pass: the reminder, not the level (its clock says 901s)
    pass_time(301)
    _sweep_in(skewed)
    _sweep_in(skewed)
    assert (wait_row(iid).reminders, wait_row(iid).level) == (1, 0)
    # When 600s more pass: the level, once
    pass_time(600)
    _sweep_in(skewed)
    _sweep_in(skewed)
    types = event_types(run_id)
    assert (types.count("interaction.reminded"), types.count("interaction.escalated")) == (1, 1)
    assert wait_row(iid).level == 1


def test_park__a_quorum_more_than_who_could_ever_answer_is_refused_nothing_stored(stack: Stack, worker: Worker) -> None:
    # Given a team of two (the agent granted on it too), and cy named but granted on nothing: three people
    # who could ever answer
    team = addressable("team:pair")
    ana, bo = granted_people(2, team)
    (cy,) = granted_people(1, granted=False)
    options = {"target": team, "assignees": [cy, ana], "escalate": [[60, [bo]]], "expires_in": 600}

    # When a Python step parks a quorum of 4 on them: its run fails with the sentence, no wait stored
    refused = start("teams.approve", {**options, "quorum": 4})
    run = wait_status(refused, "failed")
    assert "quorum 4 is more than the 3 principals who could ever answer" in (run.error or ""), run.error
    with transaction() as session:
        assert session.scalars(select(Interaction.id).where(Interaction.run_id == refused)).all() == []
    # And a quorum of 3 parks
    assert wait_parked(start("teams.approve", {**options, "quorum": 3}))["deploy"].quorum == 3

    # When a park sent from outside (POST /v1/runs with park; a remote worker's, checked alike) asks as much
    ask = Permission(key="deploy", action="deploy", resources=["prod"], target=team, quorum=4, assignees=[cy],
                     escalate=[(60, [bo])], expires_in=600)  # fmt: skip
    key = uuid.uuid4().hex
    with pytest.raises(InvalidOutcome, match="quorum 4 is more than the 3 principals"):
        start_run("teams.approve", {}, principal=AGENT, target=TARGET, idempotency_key=key,
                  park=Park(continuation="teams.seen@1", interactions=[ask]))  # fmt: skip
    # Then nothing was stored: the same key starts a run afresh
    three = Park(continuation="teams.seen@1", interactions=[dataclasses.replace(ask, quorum=3)])
    started = start_run("teams.approve", {}, principal=AGENT, target=TARGET, idempotency_key=key, park=three)
    assert wait_parked(started)["deploy"].quorum == 3
    # Assignees alone: the team's grants do not count, so two of them (cy, and bo at a level) cannot make 3
    alone = Permission(key="deploy", action="deploy", resources=["prod"], target=team, quorum=3, assignees=[cy],
                       assignees_only=True, escalate=[(60, [bo])], expires_in=600)  # fmt: skip
    with pytest.raises(InvalidOutcome, match="quorum 3 is more than the 2 principals"):
        start_run("teams.approve", {}, principal=AGENT, target=TARGET,
                  park=Park(continuation="teams.seen@1", interactions=[alone]))  # fmt: skip


def _ended_or_parked(run_id: str) -> str:
    """The run's status once its first step committed (parked, or ended)."""
    wait_for(lambda: run_status(run_id) != "running", what=f"run {run_id} past its first step")
    return run_status(run_id)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"target": "team:elsewhere"}, "target team:elsewhere"),
        ({"target": TARGET, "escalate": [[60, "team:elsewhere"]], "expires_in": 600}, "target team:elsewhere"),
        ({"target": TARGET, "assignees": ["tq-nobody"]}, "principal tq-nobody"),
        ({"target": TARGET, "assignees": [AGENT]}, f"principal {AGENT}"),
    ],
    ids=["target", "escalation", "unknown-assignee", "agent-assignee"],
)
def test_park__from_a_python_body_addressing_what_the_owner_may_not__interrupted_naming_it(
    stack: Stack, worker: Worker, options: dict[str, Any], named: str
) -> None:
    # Given an agent granted on TARGET only, and no live person named tq-nobody
    # When its Python step parks on another target, escalates to one, or names one who is no live person
    run_id = start("teams.approve", options)

    # Then the system interrupts the run and its step (authority, not the workflow's verdict), naming it,
    # and no wait exists
    assert _ended_or_parked(run_id) == "interrupted"
    run = run_row(run_id)
    assert named in (run.reason or ""), run.reason
    with transaction() as session:
        steps = session.execute(select(Step.status, Step.reason).where(Step.run_id == run_id)).all()
        assert [status for status, _ in steps] == ["interrupted"] and named in (steps[0][1] or "")
        assert session.scalars(select(Interaction.id).where(Interaction.run_id == run_id)).all() == []
    assert "interaction.asked" not in event_types(run_id)
