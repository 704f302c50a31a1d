"""Refuse request bodies over 1 MiB with 413 before they are read into memory."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import errors
from api.errors import error_response

MAX_BODY_BYTES = 1 << 20


def _declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, or ``None`` when it declares none that is a number (a streamed body)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body passes the limit (FastAPI re-raises HTTP exceptions)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, errors.TOO_LARGE.format(limit=limit))


async def within_limit(app: ASGIApp, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    """``app`` serving an HTTP request whose body may be at most ``limit`` bytes: a declared ``Content-Length``
    over it is refused at once (413); a streamed body (none declared) is counted as it is read."""
    declared = _declared_length(scope)
    if declared is not None:
        if declared > limit:
            await _refuse(limit, scope, receive, send)
        else:  # the server reads exactly the declared length: no more can arrive, nothing to count
            await app(scope, receive, send)
        return
    received = 0
    started = False

    async def capped_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit)
        return message

    async def tracked_send(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, capped_receive, tracked_send)
    except BodyTooLarge:
        if started:
            raise
        await _refuse(limit, scope, receive, send)


async def _refuse(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(413, "too_large", errors.TOO_LARGE.format(limit=limit), headers={"Connection": "close"})
    await response(scope, receive, send)
