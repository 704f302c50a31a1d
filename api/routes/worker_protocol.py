"""The HTTP worker protocol (docs/worker-protocol.md): remote workers (principals of kind `worker`, or
admins) lease due work they serve of runs on targets they hold a live grant on (admins: any), keep it with
heartbeats, journal tool calls, and complete it exactly once. A lease is its holder's: a call on it by any
other principal gets 404. Each route translates ``tasks.remote``; the store decides."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, Path, Request

from api.deps import in_thread, require
from api.errors import documented
from api.input import checked_router
from api.protocol_schemas import (
    CompleteIn,
    HeartbeatIn,
    HeartbeatOut,
    ItemOut,
    LeaseAsk,
    LeaseIn,
    LeasePage,
    ReceiptOut,
    ReleaseIn,
    ReleaseOut,
    ToolIntentIn,
    ToolOutcomeIn,
    ToolStateOut,
)
from models.tables import Principal
from tasks import remote

router = checked_router(prefix="/v1/worker", tags=["worker protocol"])

WorkerDep = Annotated[Principal, Depends(require("worker", "admin"))]
LeaseId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}\.[0-9a-f]{16}$", description="an item's `lease_id`")]
ToolKey = Annotated[str, Path(min_length=1, max_length=200, description="the tool call's key")]
POLL_S = 0.25  # a long poll looks for due work this often (one indexed statement; no transaction held)
LEASE_ERRORS = documented(401, 403, 404, 409, 410, 413, 422)


@router.post(
    "/lease",
    response_model=LeasePage,
    operation_id="lease_work",
    summary="Lease up to `max` due items of what the caller serves, of runs on targets it is granted on, waiting "
    "up to `wait_s` for one (long poll)",
    responses=documented(401, 403, 413, 422),
)
async def lease_work(body: LeaseIn, principal: WorkerDep, request: Request) -> LeasePage:
    """Every call advertises `serves` for `worker` in the worker registry: remote workers show in
    `GET /v1/workers`, and what they serve counts as served (a start, a park, fail-closed). A long poll
    whose caller has gone stops looking: what it leased then would reach no one until its lease ran out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_s
    ask = asked(body, principal)
    items = await in_thread(remote.lease, ask)
    while not items and body.max > 0 and (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(POLL_S, left))
        if await request.is_disconnected():
            break
        items = await in_thread(remote.lease_due, ask)
    return LeasePage(items=[ItemOut.model_validate(item) for item in items])


def asked(body: LeaseAsk, principal: Principal) -> remote.Ask:
    return remote.Ask(principal.id, body.worker, body.serves, body.max, body.lease_s)


@router.post(
    "/leases/{lease_id}/heartbeat",
    response_model=HeartbeatOut,
    operation_id="heartbeat_lease",
    summary="Extend a lease (409 when it was lost, 410 when its run ended)",
    responses=LEASE_ERRORS,
)
async def heartbeat(lease_id: LeaseId, body: HeartbeatIn, principal: WorkerDep) -> HeartbeatOut:
    expires = await in_thread(lambda: remote.heartbeat(lease_id, principal.id, lease_s=body.lease_s))
    return HeartbeatOut(lease_expires_at=expires)


@router.post(
    "/leases/{lease_id}/complete",
    response_model=ReceiptOut,
    operation_id="complete_lease",
    summary="Commit the item's outcome exactly once (the exact retry gets the same receipt)",
    responses=LEASE_ERRORS,
)
async def complete(lease_id: LeaseId, body: CompleteIn, principal: WorkerDep) -> ReceiptOut:
    """409 when the lease was lost (or completed with another outcome), 410 when the run ended, 422 for an
    outcome that cannot be committed: nothing is committed then (nor leased), and a 422 keeps the lease.
    With `lease`, the answer that commits also carries the next items (one request per item)."""
    then = None if body.lease is None else asked(body.lease, principal)
    done = await in_thread(remote.complete, lease_id, principal.id, body.outcome, then)
    receipt = ReceiptOut.model_validate(done.receipt)
    receipt.items = [ItemOut.model_validate(item) for item in done.items]
    return receipt


@router.post(
    "/leases/{lease_id}/release",
    response_model=ReleaseOut,
    operation_id="release_lease",
    summary="Give the item back, counted as an attempt (out of attempts, the run is interrupted)",
    responses=LEASE_ERRORS,
)
async def release(lease_id: LeaseId, body: ReleaseIn, principal: WorkerDep) -> ReleaseOut:
    state = await in_thread(remote.release, lease_id, principal.id, body.reason)
    return ReleaseOut(lease_id=lease_id, continuation_status=state.status, attempts=state.attempts,
                      run_status=state.run_status)  # fmt: skip


@router.post(
    "/leases/{lease_id}/tools",
    response_model=ToolStateOut,
    operation_id="record_tool_intent",
    summary="Journal a tool call's intent before its effect: `run` it now, or it has `settled` (do not run)",
    responses=LEASE_ERRORS,
)
async def tool_intent(lease_id: LeaseId, body: ToolIntentIn, principal: WorkerDep) -> ToolStateOut:
    state = await in_thread(lambda: remote.tool_intent(lease_id, principal.id, name=body.name, key=body.key,
                                                       args=body.args, replay=body.replay))  # fmt: skip
    return ToolStateOut.model_validate(state)


@router.post(
    "/leases/{lease_id}/tools/{key}/outcome",
    response_model=ToolStateOut,
    operation_id="record_tool_outcome",
    summary="Journal what a tool call returned (or its error) once it ran",
    responses=LEASE_ERRORS,
)
async def tool_outcome(lease_id: LeaseId, key: ToolKey, body: ToolOutcomeIn, principal: WorkerDep) -> ToolStateOut:
    state = await in_thread(
        lambda: remote.tool_outcome(lease_id, principal.id, key, result=body.result, error=body.error)
    )
    return ToolStateOut.model_validate(state)
