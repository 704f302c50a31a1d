"""A run's start as values and one statement: what the store's ``create_run`` binds (``run_params``) and judges
(``same_request``), and ``start``, which runs the store's own statements' text (models/start_sql.py, generated
from them) on a plain DB-API ``execute``: ``parkway run start`` starts a run without importing SQLAlchemy.

``execute`` is psycopg's ``Connection.execute``: it takes the driver's ``%(name)s`` parameters and returns a
cursor. The caller owns the transaction.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from models.event_rows import event_params, event_row
from models.jsonsafe import canonical_json
from models.principal_sql import unknown_principal
from models.status import PrincipalKind
from parkway.errors import Conflict, Forbidden

Execute = Callable[[str, Mapping[str, Any]], Any]

# The channel a start that leaves its first publish to the sweep notifies (beat's listener sweeps at once).
READY_CHANNEL = "parkway_ready"


def request_digest(workflow: str, payload: Any, target: str, park: Any = None) -> str:
    """What tells an idempotent retry from another request with the same key (``park``: its JSON)."""
    request = [workflow, payload, target] if park is None else [workflow, payload, target, park]
    return hashlib.sha256(canonical_json(request).encode()).hexdigest()


def run_params(*, workflow: str, payload: Any, owner_id: str, owner_name: str, target: str,
               idempotency_key: str | None, digest: str, start: bool) -> dict[str, Any]:  # fmt: skip
    """The parameters of the store's run creation (``models.store.runs.create_run``): new ids for the run
    (``id``), its first step (``sid``) and that step's continuation (``cid``), and its events."""
    rid, sid, cid = (uuid.uuid4().hex for _ in range(3))
    events = [event_row(rid, "run.created", workflow=workflow, owner=owner_name, target=target)]
    if start:
        events.append(event_row(rid, "continuation.ready", continuation_id=cid, step_id=sid, name=workflow))
    return {"id": rid, "sid": sid, "cid": cid, "workflow": workflow, "owner_id": owner_id, "target": target,
            "payload": payload, "idempotency_key": idempotency_key, "request_digest": digest,
            "at": datetime.now(UTC), **event_params(events)}  # fmt: skip


def may_start(principal: str, kind: str, target: str, granted: Callable[[], bool]) -> None:
    """``Forbidden`` unless ``principal`` (of ``kind``) is an agent and ``granted()`` says it holds a grant on
    ``target``."""
    if kind != PrincipalKind.AGENT:
        raise Forbidden(f"principal {principal} is a {kind}; runs are started by agents")
    if not granted():
        raise Forbidden(f"principal {principal} holds no grant on target {target}")


def same_request(run_id: str, status: str, key: str | None, stored: str | None, digest: str) -> str:
    """The run an idempotency key found, when it was made for this request; else ``Conflict``."""
    if stored != digest:
        raise Conflict(f"idempotency key {key!r} was used for run {run_id} with a different request",
                       {"run_id": run_id, "status": status})  # fmt: skip
    return run_id


def start(execute: Execute, workflow: str, payload: Any, *, principal: str, target: str,
          idempotency_key: str | None) -> str:  # fmt: skip
    """none -> running, as ``tasks.sdk.start_run`` without a park: the run's id (the one its idempotency key
    made before, for the same request). Its first continuation is committed never published, and
    ``READY_CHANNEL`` notified: a listening worker publishes it (``tasks.ready``), else the sweep.
    ``Forbidden`` (no such agent, no grant), ``Conflict``."""
    from models import start_sql

    owner = _row(execute(*_bound(start_sql.PRINCIPAL_BY_NAME, name=principal)))
    if owner is None:
        raise unknown_principal(principal)
    granted = _bound(start_sql.GRANTED, pid=owner["id"], target=target)
    may_start(principal, owner["kind"], target, lambda: bool(execute(*granted).fetchone()[0]))
    digest = request_digest(workflow, payload, target)
    params = run_params(workflow=workflow, payload=payload, owner_id=owner["id"], owner_name=principal,
                        target=target, idempotency_key=idempotency_key, digest=digest, start=True)  # fmt: skip
    for key in ("payload", "e0_data", "e1_data"):
        params[key] = json.dumps(params[key])
    create = _bound(start_sql.CREATE_UNPUBLISHED_RUN, **params)
    # The winner of a race on the key that committed after the statement's snapshot: the next one reads it.
    run = _row(execute(*create)) or _row(execute(*create))
    assert run is not None, "an insert that did nothing lost to a row that exists"
    if not run["made"]:
        return same_request(run["id"], run["status"], idempotency_key, run["request_digest"], digest)
    execute(f"NOTIFY {READY_CHANNEL}", {})
    return str(run["id"])


def _bound(statement: tuple[str, dict[str, Any]], **values: Any) -> tuple[str, dict[str, Any]]:
    sql, defaults = statement
    return sql, {**defaults, **values}


def _row(cursor: Any) -> dict[str, Any] | None:
    row = cursor.fetchone()
    return None if row is None else {column.name: value for column, value in zip(cursor.description, row, strict=True)}


def fleet(execute: Execute, workflow: str) -> tuple[bool, bool]:
    """Whether a live worker runs the step ``workflow`` (in Celery or remotely) and whether any worker is
    live, as ``models.store.workers.serving`` reads them (``Serving.served``, ``Serving.anyone_live``)."""
    from models import start_sql

    row = _row(execute(*_bound(start_sql.SERVING_START, key=workflow, cid=None)))
    assert row is not None  # one row, always
    return row["node"] is not None or bool(row["remote"]), bool(row["anyone_live"])
