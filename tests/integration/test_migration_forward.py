"""A migration carries an existing PostgreSQL database forward without losing a row (issue 18).

The database is made at ``FROM_REVISION`` and filled by plain SQL written against that revision's schema
(never through the store, which later revisions may rewrite), with runs in every state and what hangs off
them. Upgraded to head, every run and interaction reads back through the HTTP API as it was, and every
wait still open is answered with ``tasks.sdk.answer`` (or re-driven by the sweep) and run to completion by
a real worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from parkway.db import transaction
from parkway.migrate import alembic_config
from tasks.sdk import answer
from tests.integration.helpers import database_at
from tests.support import AGENT, HUMAN, TARGET, Stack, new_response_id, wait_for

FROM_REVISION = "0009"  # the head before issue 18's redesign: what a deployed database holds today
LONG_AGO = datetime.now(UTC) - timedelta(hours=2)
EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS test_effects (run_id VARCHAR(64) NOT NULL, tag VARCHAR(64) NOT NULL)"

# run id -> (workflow, run status, step status, continuation (kind, status) or None)
RUNS: dict[str, tuple[str, str, str, tuple[str, str] | None]] = {
    "fw-running-ready": ("t.after", "running", "running", ("start", "ready")),
    "fw-running-claimed": ("t.after", "running", "running", ("start", "claimed")),
    "fw-waiting-question": ("t.ask_one", "waiting", "parked", None),
    "fw-waiting-two": ("t.ask_two", "waiting", "parked", None),
    "fw-waiting-permission": ("t.permission", "waiting", "parked", None),
    "fw-completed": ("t.tool", "completed", "completed", ("start", "consumed")),
    "fw-failed": ("t.fail", "failed", "failed", ("start", "consumed")),
    "fw-canceled": ("t.ask_one", "canceled", "canceled", ("start", "consumed")),
    "fw-interrupted": ("t.ask_one", "interrupted", "interrupted", ("resume", "dead")),
}
# interaction id -> (run id, key, kind, status, continuation name of the step)
INTERACTIONS = {
    "fw-i-question": ("fw-waiting-question", "go", "question", "pending"),
    "fw-i-window": ("fw-waiting-two", "window", "question", "answered"),
    "fw-i-reason": ("fw-waiting-two", "reason", "question", "pending"),
    "fw-i-shell": ("fw-waiting-permission", "shell", "permission", "pending"),
    "fw-i-canceled": ("fw-canceled", "go", "question", "canceled"),
    "fw-i-interrupted": ("fw-interrupted", "go", "question", "interrupted"),
}
CONTINUES = {"t.ask_one": "t.one_done@1", "t.ask_two": "t.finish@1", "t.permission": "t.permission_done@1"}
TERMINAL = {"completed", "failed", "canceled", "interrupted"}


@dataclass(frozen=True)
class Json:
    """A value for a ``json`` column (dicts and lists are one already)."""

    value: Any


def insert(table: str, **row: Any) -> None:
    """One row as the code at ``FROM_REVISION`` wrote it."""
    row = {k: Json(v) if isinstance(v, dict | list) else v for k, v in row.items()}
    columns = ", ".join(row)
    values = ", ".join(f"CAST(:{k} AS json)" if isinstance(v, Json) else f":{k}" for k, v in row.items())
    params = {k: json.dumps(v.value) if isinstance(v, Json) else v for k, v in row.items()}
    with transaction() as session:
        session.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({values})"), params)


def fill_at_from_revision() -> None:
    """Runs in every state, with their steps, continuations, interactions, a tool call, a review, events."""
    at = LONG_AGO
    with transaction() as session:
        session.execute(text(EFFECTS_DDL))
    for pid, kind, name in (("fw-agent", "agent", AGENT), ("fw-human", "human", HUMAN)):
        insert("principals", id=pid, kind=kind, name=name, created_at=at)
        insert("grants", id=f"g-{pid}", principal_id=pid, target=TARGET, created_at=at)
    for run_id, (workflow, status, step_status, cont) in RUNS.items():
        done = status in TERMINAL
        result = {"out": 1} if status == "completed" else None
        error = "the body broke" if status == "failed" else None
        reason = {"canceled": "no longer needed", "interrupted": "continuation t.gone@9 is not registered"}
        insert(
            "runs", id=run_id, workflow=workflow, status=status, owner_id="fw-agent", target=TARGET,
            payload={"cmd": "ls"} if workflow == "t.permission" else {}, result=result, error=error,
            reason=reason.get(status), created_at=at, updated_at=at, completed_at=at if done else None,
            finished_by="exec-1" if done else None, projection_pending=False,
        )  # fmt: skip
        step_id = f"{run_id}-s0"
        insert(
            "steps", id=step_id, run_id=run_id, seq=0, name=workflow, status=step_status, payload={},
            snapshot={"service": "api"}, continuation=CONTINUES.get(workflow), result=result, error=error,
            created_at=at, updated_at=at,
        )  # fmt: skip
        if cont is not None:
            kind, cstatus = cont
            insert(
                "continuations", id=f"{run_id}-c", run_id=run_id, step_id=step_id, kind=kind,
                name=workflow if kind == "start" else "t.gone@9", status=cstatus, attempts=1, publishes=1,
                enqueued_at=at, lease_expires_at=at if cstatus == "claimed" else None,
                claimed_by="gone-worker" if cstatus == "claimed" else None,
                reason="not registered" if cstatus == "dead" else None, created_at=at,
                consumed_at=at if cstatus == "consumed" else None,
            )  # fmt: skip
        insert("events", run_id=run_id, type="run.created", at=at, data={"run_id": run_id, "workflow": workflow})
    for iid, (run_id, key, kind, status) in INTERACTIONS.items():
        answered, closed = status == "answered", status in ("canceled", "interrupted")
        question = kind == "question"
        insert(
            "interactions", id=iid, run_id=run_id, step_id=f"{run_id}-s0", key=key, kind=kind,
            prompt="Why?" if question else None, schema={"type": "string"} if question else None,
            action=None if question else "shell.exec", resources=None if question else ["ls"], target=TARGET,
            status=status, created_at=at,
            **({"value": Json("now"), "response_id": "r-window", "response_digest": "d" * 64,
                "answered_by_id": "fw-human", "answered_at": at} if answered else {}),
            **({"closed_at": at, "reason": "closed before the upgrade"} if closed else {}),
        )  # fmt: skip
    insert(
        "tool_calls", id="fw-tool", run_id="fw-completed", step_id="fw-completed-s0", key="apply", name="effect",
        args_digest="a" * 64, replay="never", phase="settled", possibly_ran=False, outcome={"value": 1}, runs=1,
        created_at=at, updated_at=at,
    )  # fmt: skip
    insert(
        "reviews", id="fw-review", run_id="fw-completed", step_id="fw-completed-s0", kind="lint", status="completed",
        verdict="clean", finding_count=3, verification_count=2, execution_id="exec-1", created_at=at, updated_at=at,
    )  # fmt: skip
    insert(
        "schedule_history", run_id="fw-completed", workflow="t.tool", status="completed", completed_at=at,
        execution_id="exec-1", recorded_at=at,
    )  # fmt: skip


@pytest.fixture
def sent() -> None:
    """Publishes are real here (this package's ``sent`` records them instead): a worker consumes them."""


@pytest.fixture
def forward_db(stack: Stack) -> Iterator[str]:
    """A database of its own at ``FROM_REVISION``, filled, then upgraded to head; the stack points at it."""
    with database_at(stack, FROM_REVISION, fill_at_from_revision) as url:
        command.upgrade(alembic_config(), "head")
        yield url


def test_migration_forward__every_run_readable_and_every_wait_answerable(forward_db: str, stack: Stack) -> None:
    from api.app import app

    # Given the upgraded database (the fixture) and an admin made the public way
    made = stack.parkway("token", "create", "--kind", "admin", "--name", "fw-root")
    assert made.returncode == 0, made.stderr
    auth = {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
    with TestClient(app) as client:

        def run(run_id: str) -> dict[str, Any]:
            got = client.get(f"/v1/runs/{run_id}", headers=auth)
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            return body

        # Then every run reads back with the status, result, error and reason it had
        for run_id, (workflow, status, _, _) in RUNS.items():
            body = run(run_id)
            assert (body["workflow"], body["status"]) == (workflow, status), run_id
            assert body["owner"] == AGENT
            events = client.get(f"/v1/runs/{run_id}/events?after=0", headers=auth)
            assert events.status_code == 200 and [e["type"] for e in events.json()["items"]][:1] == ["run.created"]
        completed = run("fw-completed")
        assert completed["result"] == {"out": 1}
        assert [(t["key"], t["phase"]) for t in completed["tool_calls"]] == [("apply", "settled")]
        assert [(r["status"], r["finding_count"], r["verification_count"]) for r in completed["reviews"]] == [
            ("completed", 3, 2)
        ]
        assert run("fw-failed")["error"] == "the body broke"
        assert run("fw-interrupted")["reason"] == "continuation t.gone@9 is not registered"
        for iid, (run_id, key, kind, status) in INTERACTIONS.items():
            got = client.get(f"/v1/interactions/{iid}", headers=auth)
            assert got.status_code == 200, got.text
            assert (got.json()["run_id"], got.json()["key"], got.json()["kind"], got.json()["status"]) == (
                run_id,
                key,
                kind,
                status,
            )

        # When every open wait is answered, and a worker runs (its startup sweep re-drives the stranded
        # start continuations, ready and claimed with an expired lease: the broker holds no message for
        # them, and none of other tests, which the sweep would take for theirs)
        stack.flush_broker()
        stack.start_worker()
        for iid, value in (("fw-i-question", "yes"), ("fw-i-reason", "because"), ("fw-i-shell", {"approved": True})):
            receipt = answer(iid, value, response_id=new_response_id(), principal=HUMAN)
            assert receipt["status"] in ("answered", "rejected")

        # Then every run that could go on completes, and the closed ones stay as they were
        def settled() -> bool:
            return all(run(r)["status"] in TERMINAL for r in RUNS)

        wait_for(settled, timeout=60, what="every run terminal after the upgrade")
        statuses = {r: run(r)["status"] for r in RUNS}
        assert statuses == {r: ("completed" if s in ("running", "waiting") else s) for r, (_, s, _, _) in RUNS.items()}
        assert run("fw-waiting-two")["result"]["window"] == "now"
        assert run("fw-waiting-permission")["result"] == {"approved": True, "status": "answered"}
        assert run("fw-running-claimed")["result"] == {"after": {}}
