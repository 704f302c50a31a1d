"""What ``GET /v1/workers`` and ``parkway workers`` show: the live workers and the versions work still needs,
made from the rows of the store's two reads (``models.store.workers.LIVE_WORKERS``, ``models.fleet.VERSIONS``).

The store runs those statements on SQLAlchemy; ``parkway workers`` runs their compiled text
(``models.fleet_sql``, generated from them and kept in step by tests/unit/test_fleet_sql.py) through a plain
psycopg ``execute``, without importing SQLAlchemy: one statement each, two drivers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Execute = Callable[[str, Mapping[str, Any]], Any]  # psycopg's Connection.execute, or exec_driver_sql


@dataclass(frozen=True)
class WorkerView:
    node: str
    kind: str  # celery | remote | push (``models.served.kind_of``)
    pid: int
    steps: list[str]
    continuations: list[str]
    started_at: datetime  # since when it serves (a push handler: since it was registered)
    heartbeat_at: datetime  # a push handler: its last accepted push (or its registration)
    remote: bool


@dataclass(frozen=True)
class VersionLoad:
    """A continuation version that work still needs."""

    version: str  # name@version
    parked: int  # parked steps waiting on it (pending interactions)
    due: int  # its continuations made due (answered, expired) and not yet run: ready or claimed
    served: bool  # a live worker advertises it now
    grace_left_s: float | None = None  # unserved: seconds before its waits are interrupted; None: served, or paused


def worker_view(row: Sequence[Any]) -> WorkerView:
    """A row of ``LIVE_WORKERS`` (node, kind, pid, steps, continuations, started_at, heartbeat_at, remote)."""
    node, kind, pid, steps, continuations, started_at, heartbeat_at, remote = row
    return WorkerView(node, kind, pid, list(steps), list(continuations), started_at.astimezone(UTC),
                      heartbeat_at.astimezone(UTC), bool(remote))  # fmt: skip


def version_load(row: Sequence[Any]) -> VersionLoad:
    """A row of ``VERSIONS`` (version, parked, due, served, grace left in seconds)."""
    version, parked, due, served, left = row
    return VersionLoad(str(version), int(parked), int(due), bool(served), None if left is None else float(left))


def live_workers(execute: Execute) -> list[WorkerView]:
    """The live workers, by node name (``models.store.workers.live_workers``), on a DB-API ``execute``."""
    from models.fleet_sql import LIVE_WORKERS

    sql, params = LIVE_WORKERS
    return [worker_view(row) for row in execute(sql, params).fetchall()]


def versions(execute: Execute, *, grace_s: float) -> list[VersionLoad]:
    """The versions work still needs (``models.fleet.versions``), on a DB-API ``execute``."""
    from models.fleet_sql import VERSIONS

    sql, params = VERSIONS
    return [version_load(row) for row in execute(sql, {**params, "grace": -grace_s}).fetchall()]
