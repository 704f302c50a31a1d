"""Agents address only what they are granted (SPEC §4 "Trust", rule 3), over HTTP on a real uvicorn: a run
started with a park, and a remote worker's park, on a target the run's owner holds no grant on (its wait's
own, or an escalation's), or naming as an assignee one who is no live person, get 403 naming it and store
nothing. A Python body's park is interrupted instead: tests/acceptance/test_teams.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import String, cast, select

from models.tables import Interaction, Run
from parkway.db import transaction
from tests.acceptance.protocol_support import DECIDE, PLAN, QUESTION, Proto, receipts
from tests.support import TARGET, event_types

ELSEWHERE = "team:elsewhere"  # no principal of the module is granted on it
REFUSED = [
    pytest.param({**QUESTION, "target": ELSEWHERE}, f"target {ELSEWHERE}", id="target"),
    pytest.param({**QUESTION, "escalate": [[60, ELSEWHERE]], "expires_in": 600}, f"target {ELSEWHERE}",
                 id="escalation"),
    pytest.param({**QUESTION, "assignees": ["proto-ghost"]}, "principal proto-ghost", id="unknown-assignee"),
    pytest.param({**QUESTION, "assignees": ["proto-worker"]}, "principal proto-worker", id="worker-assignee"),
]  # fmt: skip


def runs_marked(mark: str) -> list[str]:
    """The runs whose payload carries ``mark`` (their waits and events need them: nothing without one)."""
    with transaction() as session:
        return list(session.scalars(select(Run.id).where(cast(Run.payload, String).contains(mark))))


def waits(run_id: str) -> list[str]:
    with transaction() as session:
        return list(session.scalars(select(Interaction.id).where(Interaction.run_id == run_id)))


def refusal(answer: Any, named: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "forbidden" and named in answer.json()["detail"], answer.text


@pytest.mark.parametrize(("asked", "named"), REFUSED)
def test_start_with_park__addressing_what_the_agent_may_not__403_nothing_stored__the_key_then_works(
    proto: Proto, asked: dict[str, Any], named: str
) -> None:
    # Given an agent granted on TARGET only, starting a run on TARGET whose park addresses more
    key, mark = uuid.uuid4().hex, uuid.uuid4().hex
    body = {"workflow": "proto.outside", "payload": {"mark": mark}, "target": TARGET,
            "park": {"continuation": DECIDE, "interactions": [asked]}}  # fmt: skip

    # When it is sent: 403 naming what it may not address
    refusal(proto.call("POST", "/v1/runs", "agent", body, headers={"Idempotency-Key": key}), named)

    # Then no run was stored (nor its waits or events, which need it), and the same key starts a run with
    # a valid body
    assert runs_marked(mark) == []
    valid = {**body, "park": {"continuation": DECIDE, "interactions": [QUESTION]}}
    made = proto.call("POST", "/v1/runs", "agent", valid, headers={"Idempotency-Key": key})
    assert (made.status_code, made.json()["status"]) == (201, "waiting"), made.text
    assert runs_marked(mark) == [made.json()["id"]]


@pytest.mark.parametrize(("asked", "named"), REFUSED)
def test_remote_worker_park__addressing_what_the_owner_may_not__403_nothing_committed_lease_kept(
    proto: Proto, asked: dict[str, Any], named: str
) -> None:
    # Given a run on the test's target of a step only the remote worker serves, leased by it (the test's worker
    # is granted on that target alone: a worker leases only runs on targets it holds)
    made = proto.call("POST", "/v1/runs", "agent", {"workflow": PLAN, "target": proto.target})
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    item = proto.lease_one(run_id)
    events = event_types(run_id)

    # When it completes with a park addressing what the run's owner may not: 403 naming it
    refusal(proto.complete(item["lease_id"], {"type": "park", "continuation": DECIDE, "interactions": [asked]}),
            named)  # fmt: skip

    # Then nothing was committed, and the lease still holds the work: a valid park commits under it
    assert (proto.run(run_id)["status"], receipts(run_id), waits(run_id)) == ("running", 0, [])
    assert event_types(run_id) == events
    parked = proto.complete(item["lease_id"], {"type": "park", "continuation": DECIDE, "interactions": [QUESTION]})
    assert (parked.status_code, parked.json()["run_status"]) == (200, "waiting"), parked.text
