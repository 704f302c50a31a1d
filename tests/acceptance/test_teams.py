"""Quorum waits on real worker processes (docs/teams.md): many people answer at once, one decision, the
step resumed exactly once."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import tests.team_workflows  # noqa: F401  (start() checks the workflow is registered in this process too)
from models import store
from parkway.db import transaction
from parkway.errors import Conflict
from tasks.sdk import answer
from tests.support import TARGET, Stack, continuations, event_types, start, wait_parked, wait_status

WORKFLOWS = "tests.workflows,tests.team_workflows"


@pytest.fixture(scope="module")
def worker(stack: Stack):  # type: ignore[no-untyped-def]
    return stack.start_worker(PARKWAY_IMPORTS=WORKFLOWS)


def granted_people(count: int) -> list[str]:
    names = [f"tq-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    with transaction() as session:
        for name in names:
            made = store.create_principal(session, kind="human", name=name, token_hash=None)
            assert made is not None
            store.create_grant(session, principal_id=made.id, target=TARGET)
    return names


def test_quorum__twenty_people_answer_a_quorum_3_permission_at_once_one_decision_one_resume(
    stack: Stack, worker: Any
) -> None:
    # Given a permission that needs 3 approvals, parked by a real worker, and 20 people granted on its target
    people = granted_people(20)
    run_id = start("teams.approve", {"target": TARGET, "quorum": 3})
    iid = wait_parked(run_id)["deploy"].id

    # When all 20 approve at the same moment
    barrier = threading.Barrier(len(people))

    def approve(name: str) -> str:
        barrier.wait()
        try:
            return str(answer(iid, {"approved": True}, response_id=f"r-{name}", principal=name)["status"])
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
