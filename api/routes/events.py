"""Events: a run's ordered log by cursor, and a server-sent event stream of what the caller may see."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

import anyio
from fastapi import Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api import errors
from api.deps import PrincipalDep, SessionDep, TokenDep, authenticate, presented
from api.errors import ApiError, documented
from api.event_schemas import EventPage, event_out, sse_item_schema
from api.input import checked_router
from api.metrics import OPEN_STREAMS
from api.schemas import ID
from models import access, event_log
from models.tables import Principal
from parkway.db import database_unavailable, transaction
from parkway.tokens import hash_token

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
LAST_SEQ = 2**62  # the largest cursor a stream or a page takes (``after``'s bound)

# Who an open stream is for, read again on every poll in the poll's own transaction: ``None`` once the
# caller may no longer read (its token rotated, its principal disabled, its page session ended).
Reader = Callable[[Session], Principal | None]


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
    after: Annotated[int, Query(ge=0, le=LAST_SEQ, description="return events with seq > after")] = 0,
    cursor: Annotated[
        str | None, Query(pattern=r"^[0-9]{1,18}$", description="a page's `next` (same as after)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> EventPage:
    start = _cursor(after, cursor)
    readable_run(session, principal, run_id)
    page = event_log.run_events(session, run_id, after=start, limit=limit)
    return EventPage(items=[event_out(e) for e in page.items], next=page.next)


@router.get(
    "/v1/events/stream",
    response_class=StreamingResponse,
    operation_id="stream_events",
    summary="Server-sent events of every run the caller may see, or of one (`id:` is the event's seq)",
    responses={
        200: {"description": STREAM_FORMAT, "content": {"text/event-stream": {"itemSchema": sse_item_schema()}}},
        **documented(401, 403, 404, 422),
    },
)
async def stream(
    request: Request,
    credentials: TokenDep,
    after: Annotated[int, Query(ge=0, le=LAST_SEQ, description="start after this seq")] = 0,
    run_id: Annotated[
        str | None, Query(pattern=ID, description="only this run's events (403 or 404 as its events would be)")
    ] = None,
    last_event_id: Annotated[
        str | None, Header(max_length=20, description="set by reconnecting clients; wins over `after`")
    ] = None,
) -> StreamingResponse:
    token = presented(credentials)
    principal = await run_in_threadpool(authenticate, token)  # a 401 before the stream opens
    if run_id is not None:
        await run_in_threadpool(_in_transaction, readable_run, principal, run_id)
    token_hash = hash_token(token or "")
    return event_stream(request, lambda session: access.principal_by_token(session, token_hash),
                        resume_from(last_event_id, after), run_id=run_id)  # fmt: skip


def readable_run(session: Session, principal: Principal, run_id: str) -> None:
    """Nothing when the caller may read the run's events now; else a 404 (no such run) or 403 ``ApiError``."""
    if access.get_run(session, run_id) is None:
        raise ApiError(404, errors.RUN_NOT_FOUND.format(id=run_id))
    if not access.can_see_run(session, principal, run_id):
        raise ApiError(403, errors.RUN_FORBIDDEN.format(name=principal.name, id=run_id))


def _in_transaction(check: Callable[[Session, Principal, str], None], principal: Principal, run_id: str) -> None:
    with transaction() as session:
        check(session, principal, run_id)


def resume_from(last_event_id: str | None, after: int) -> int:
    """Where a stream starts: a reconnecting client's ``Last-Event-ID`` (a seq), else ``after``; a header
    that is not a seq a stream could have sent is ignored."""
    if last_event_id and last_event_id.isascii() and last_event_id.isdigit() and int(last_event_id) <= LAST_SEQ:
        return int(last_event_id)
    return after


def event_stream(request: Request, reader: Reader, after: int, *, run_id: str | None = None) -> StreamingResponse:
    """The ``text/event-stream`` response of ``sse_events`` (of one run's events: ``run_id``)."""
    return StreamingResponse(
        sse_events(request, reader, after, run_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _poll(reader: Reader, after: int, run_id: str | None = None) -> tuple[list[tuple[int, str]], int] | None:
    """One short read: who the stream is for (``None``: no one may read it any more), then the events it
    may see after the cursor (of ``run_id`` only, when given), as (seq, JSON), and the next cursor."""
    with transaction() as session:
        principal = reader(session)
        if principal is None:
            return None
        events, cursor = event_log.visible_events(session, principal, after=after, limit=STREAM_BATCH, run_id=run_id)
        return [(e.seq, event_out(e).model_dump_json()) for e in events], cursor


async def sse_events(request: Request, reader: Reader, after: int, run_id: str | None = None) -> AsyncIterator[str]:
    """Poll the database every ``POLL_S``; the caller and its grants are read on every poll. Ends when the
    client leaves, or once ``reader`` finds no one who may read it."""
    OPEN_STREAMS.inc()
    try:
        yield "retry: 2000\n\n"
        cursor, quiet = after, 0.0
        while not await request.is_disconnected():
            try:
                polled = await run_in_threadpool(_poll, reader, cursor, run_id)
            except Exception as exc:  # the database went away: end the stream (the client resumes from its id)
                if not database_unavailable(exc):
                    raise
                errors.log.warning("event stream ended: the database cannot be reached (%s)", type(exc).__name__)
                return
            if polled is None:
                return
            events, cursor = polled
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
