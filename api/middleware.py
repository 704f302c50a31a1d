"""The API's own ASGI middleware, one layer and the outermost: every request, and every message it sends,
passes through each layer of the stack, so what were three (a startup guard, the request metrics, the body
limit) is one.

- the lifespan: its startup refused when ``startup_problem`` says why, in one line on stderr and no traceback
  (the server exits 3, as the worker and beat do), before the app's own lifespan runs;
- every HTTP request's latency observed under its route template (``api.metrics.observe``), refused ones too;
- request bodies over ``max_body_bytes`` refused with 413 before they are read (``api.limits.within_limit``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import metrics
from api.limits import MAX_BODY_BYTES, within_limit
from parkway.logs import setup_logging


class RefusedToStart(RuntimeError):
    """This process must not serve: ``startup_problem`` said why."""


class ApiMiddleware:
    def __init__(
        self, app: ASGIApp, *, startup_problem: Callable[[], str | None], max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        self.app = app
        self.startup_problem = startup_problem
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 500

        async def observe_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await within_limit(self.app, self.limit, scope, receive, observe_status)
        finally:
            metrics.observe(scope, status, started)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        startup = await receive()
        setup_logging()
        problem = await run_in_threadpool(self.startup_problem)
        if problem is not None:
            line = f"parkway api: refusing to start: {problem}"
            sys.stderr.write(line + "\n")
            await send({"type": "lifespan.startup.failed", "message": ""})  # said above, once
            raise RefusedToStart(line)  # the server, having been told, ends quietly; a TestClient raises it
        pending = [startup]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)
