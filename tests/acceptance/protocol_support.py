"""The remote worker of the worker protocol's acceptance tests (docs/worker-protocol.md), driven with httpx as
a TypeScript or Go agent would: ``Proto`` and the tokens it calls with (the ``proto`` fixture, conftest.py)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import func, select

from models.fleet_tables import LeaseReceipt
from parkway.db import transaction
from tests.support import TARGET, Worker

DECIDE = "proto.decide@1"  # a continuation only the remote worker serves
PLAN = "proto.plan"  # a step only the remote worker serves
SERVES = [PLAN, DECIDE]
QUESTION = {"kind": "question", "key": "otp", "prompt": "The code?", "target": TARGET,
            "schema": {"type": "object", "properties": {"code": {"type": "string"}, "note": {"type": "string"}}},
            "sensitive": ["code"]}  # fmt: skip


@dataclass
class Proto:
    """The API, the Celery worker beside it, the tokens by role, and the target the runs go on: a test's own
    (``for_test``), which its ``worker`` alone is granted on, so it leases only what that test made."""

    http: httpx.Client
    tokens: dict[str, str]
    celery: Worker
    target: str = TARGET
    worker_grant: str | None = None  # the grant of the ``worker`` token on ``target`` (``for_test``)

    def call(self, method: str, path: str, who: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kwargs.pop("headers", {})}
        return self.http.request(method, path, json=body, headers=headers, **kwargs)

    def principal(self, kind: str) -> tuple[str, str]:
        """A new principal of ``kind``, made as an operator makes one: its name and its token."""
        name = f"proto-{kind}-{uuid.uuid4().hex[:8]}"
        made = self.call("POST", "/v1/principals", "admin", {"kind": kind, "name": name})
        assert made.status_code == 201, made.text
        return name, str(made.json()["token"])

    def grant(self, name: str, target: str) -> str:
        """The principal ``name`` granted on ``target``: the grant's id."""
        granted = self.call("POST", "/v1/grants", "admin", {"principal": name, "target": target})
        assert granted.status_code == 201, granted.text
        return str(granted.json()["id"])

    def for_test(self) -> Proto:
        """This proto on a target of its own: the agent and the person granted on it too, and a new worker
        granted on it alone (``worker_grant``), its keys advertised: from now on what it serves there is its."""
        target = f"team:proto-{uuid.uuid4().hex[:8]}"
        for role in ("agent", "human"):
            self.grant(f"proto-{role}", target)
        name, token = self.principal("worker")
        mine = dataclasses.replace(self, tokens={**self.tokens, "worker": token}, target=target,
                                   worker_grant=self.grant(name, target))  # fmt: skip
        assert mine.lease(n=0, wait_s=0) == []
        return mine

    def lease(self, *, wait_s: float = 10, lease_s: float = 30, n: int = 1, worker: str = "ts-agent-1",
              who: str = "worker", serves: tuple[str, ...] = (PLAN, DECIDE)) -> list[Any]:  # fmt: skip
        body = {"worker": worker, "serves": list(serves), "max": n, "wait_s": wait_s, "lease_s": lease_s}
        got = self.call("POST", "/v1/worker/lease", who, body)
        assert got.status_code == 200, got.text
        return list(got.json()["items"])

    def lease_one(self, run_id: str, **kwargs: Any) -> dict[str, Any]:
        """The next item leased, which must be of ``run_id``: the worker leases only this test's runs."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            items = self.lease(**kwargs)
            if items:
                [item] = items
                assert item["run_id"] == run_id, item
                return dict(item)
        raise AssertionError(f"no item of run {run_id} was leased")

    def complete(self, lease_id: str, outcome: Any, lease: dict[str, Any] | None = None) -> httpx.Response:
        """``lease``: also lease the next items (``max`` of them), handed out in the answer."""
        body = (
            {"outcome": outcome}
            if lease is None
            else {"outcome": outcome, "lease": {"worker": "ts-agent-1", "serves": SERVES, **lease}}
        )
        return self.call("POST", f"/v1/worker/leases/{lease_id}/complete", "worker", body)  # fmt: skip

    def release(self, lease_id: str, reason: str | None = None) -> httpx.Response:
        return self.call("POST", f"/v1/worker/leases/{lease_id}/release", "worker", {"reason": reason})

    def park(self, key: str | None = None, interactions: list[Any] | None = None, continuation: str = DECIDE) -> str:
        body = {"workflow": "proto.outside", "payload": {"from": "ts"}, "target": self.target,
                "park": {"continuation": continuation, "snapshot": {"cmd": "deploy api"},
                         "interactions": interactions or [QUESTION]}}  # fmt: skip
        made = self.call("POST", "/v1/runs", "agent", body, headers={"Idempotency-Key": key or uuid.uuid4().hex})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def answer(self, run_id: str, value: Any, key: str = "otp") -> None:
        run = self.call("GET", f"/v1/runs/{run_id}", "human").json()
        iid = next(i["id"] for i in run["interactions"] if i["key"] == key)
        done = self.call("POST", f"/v1/interactions/{iid}/answer", "human", {"response_id": uuid.uuid4().hex,
                                                                               "value": value})  # fmt: skip
        assert done.status_code == 200, done.text

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/runs/{run_id}", "human").json())

    def due(self) -> str:
        """A run parked from outside and answered: its resume is due for the remote worker."""
        run_id = self.park()
        self.answer(run_id, {"code": "123456", "note": "ok"})
        return run_id


def receipts(run_id: str) -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).where(LeaseReceipt.run_id == run_id)) or 0)
