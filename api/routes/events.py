"""Events: a run's ordered log by cursor, and a server-sent event stream of what the caller may see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api import errors
from api.deps import PrincipalDep, SessionDep
from api.errors import ApiError, documented
from api.event_schemas import EventPage, event_out
from api.input import checked_router
from api.metrics import OPEN_STREAMS
from api.schemas import ID
from models import access, event_log
from models.tables import Principal
from parkway.db import database_unavailable, transaction

router = checked_router(tags=["events"])

STREAM_FORMAT = (
    "A `text/event-stream`. It opens with `retry: 2000`; then one message per event, in `seq` order: "
    "`id: <seq>`, then `data: <one event as JSON>` (the same object as an item of `GET /v1/runs/{run_id}/events`, "
    "schemas `RunEvent`, `StepEvent`, `InteractionEvent`, `ContinuationEvent`, `ToolCallEvent`, `ReviewEvent` "
    "or `OtherEvent` by the family of its `type`), then a blank line. `: keep-alive` comment lines come after "
    "15 s without events. Reconnect with `Last-Event-ID: <last seq>` (or `?after=`) to resume where you were."
)
POLL_S = 0.5
KEEPALIVE_S = 15.0
STREAM_BATCH = 100


def _cursor(after: int, cursor: str | None) -> int:
    return after if cursor is None else int(cursor)


@router.get(
    "/v1/runs/{run_id}/events",
    response_model=EventPage,
    operation_id="list_run_events",
    summary="A run's events with seq > after, in order",
    responses=documented(401, 403, 404, 422),
)
def run_events(
    run_id: Annotated[str, Path(pattern=ID, description="the run's id")],
    principal: PrincipalDep,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=2**62, description="return events with seq > after")] = 0,
    cursor: Annotated[
        str | None, Query(pattern=r"^[0-9]{1,18}$", description="a page's `next` (same as after)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> EventPage:
    start = _cursor(after, cursor)
    if access.get_run(session, run_id) is None:
        raise ApiError(404, errors.RUN_NOT_FOUND.format(id=run_id))
    if not access.can_see_run(session, principal, run_id):
        raise ApiError(403, errors.RUN_FORBIDDEN.format(name=principal.name, id=run_id))
    page = event_log.run_events(session, run_id, after=start, limit=limit)
    return EventPage(items=[event_out(e) for e in page.items], next=page.next)


@router.get(
    "/v1/events/stream",
    response_class=StreamingResponse,
    operation_id="stream_events",
    summary="Server-sent events of every run the caller may see (`id:` is the event's seq)",
    responses={
        200: {
            "description": STREAM_FORMAT,
            "content": {"text/event-stream": {"schema": {"type": "string", "description": STREAM_FORMAT}}},
        },
        **documented(401, 422),
    },
)
async def stream(
    request: Request,
    principal: PrincipalDep,
    after: Annotated[int, Query(ge=0, le=2**62, description="start after this seq")] = 0,
    last_event_id: Annotated[
        str | None, Header(max_length=20, description="set by reconnecting clients; wins over `after`")
    ] = None,
) -> StreamingResponse:
    start = int(last_event_id) if last_event_id and last_event_id.isascii() and last_event_id.isdigit() else after
    return StreamingResponse(
        sse_events(request, principal, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _poll(principal: Principal, after: int) -> tuple[list[tuple[int, str]], int]:
    """One short read: the visible events after the cursor, as (seq, JSON), and the next cursor."""
    with transaction() as session:
        events, cursor = event_log.visible_events(session, principal, after=after, limit=STREAM_BATCH)
        return [(e.seq, event_out(e).model_dump_json()) for e in events], cursor


async def sse_events(request: Request, principal: Principal, after: int) -> AsyncIterator[str]:
    """Poll the database every ``POLL_S``; grants are read on every poll; ends when the client leaves."""
    OPEN_STREAMS.inc()
    try:
        yield "retry: 2000\n\n"
        cursor, quiet = after, 0.0
        while not await request.is_disconnected():
            try:
                events, cursor = await run_in_threadpool(_poll, principal, cursor)
            except Exception as exc:  # the database went away: end the stream (the client resumes from its id)
                if not database_unavailable(exc):
                    raise
                errors.log.warning("event stream ended: the database cannot be reached (%s)", type(exc).__name__)
                return
            for seq, data in events:
                yield f"id: {seq}\ndata: {data}\n\n"
            if events:
                quiet = 0.0
                continue
            if quiet >= KEEPALIVE_S:
                yield ": keep-alive\n\n"
                quiet = 0.0
            await anyio.sleep(POLL_S)
            quiet += POLL_S
    finally:
        OPEN_STREAMS.dec()
