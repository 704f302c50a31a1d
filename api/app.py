"""The FastAPI app (``api.app:app``). It refuses to start on a schema it does not match or a bad key."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import docs, errors, payloads, presence
from api.deps import authentication_problem
from api.input import CheckedRoute
from api.limits import MAX_BODY_BYTES
from api.middleware import ApiMiddleware
from api.pages import decisions
from api.pages import links as link_pages
from api.pages import runs as run_pages
from api.routes import (
    decisions as decision_record,
)
from api.routes import (
    events,
    grants,
    handlers,
    health,
    interactions,
    links,
    principals,
    runs,
    webhooks,
    worker_protocol,
    workers,
)
from parkway import tracing
from parkway.settings import get_settings
from parkway.startup import start_problem

DESCRIPTION = """Durable human-in-the-loop waits for agent workflows.

Every `/v1` route needs `Authorization: Bearer <token>`. Errors are JSON
`{"error": code, "detail": text, "state"?: {...}, "errors"?: [...]}`. See docs/api.md.
"""


def startup_problem() -> str | None:
    """Why this process must not serve, or ``None``: a ``PARKWAY_IMPORTS`` module that is not there, then
    what ``parkway.startup.start_problem`` finds (a bad key, a schema it does not match; it waits for a
    database that cannot be reached yet, as the worker and beat do)."""
    return get_settings().imports_problem() or start_problem("api")


def import_workflows() -> None:
    """Import ``PARKWAY_IMPORTS`` so ``POST /v1/runs`` knows the workflows."""
    for module in get_settings().import_modules:
        importlib.import_module(module)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    import_workflows()
    beating = asyncio.create_task(presence.heartbeat())  # the remote fleet's presence (models.served)
    yield
    beating.cancel()


def traced(app: FastAPI) -> None:
    """When ``OTEL_*`` asks (docs/operations.md "Tracing"): a SERVER span per request (the maintained
    FastAPI instrumentation, which continues a caller's ``traceparent``), around Parkway's own spans. An approval
    link's path is its bearer token, which the instrumentation would export as the URL: its pages get no span."""
    if tracing.setup("parkway-api"):
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, excluded_urls="healthz,readyz,metrics,/links/", exclude_spans=["receive", "send"]
        )


def create_app() -> FastAPI:
    app = FastAPI(
        title="Parkway",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # api/docs.py serves /docs and /redoc from local files instead of a CDN
        redoc_url=None,
    )
    errors.install(app, authentication_problem)
    # Outermost of the app's: the lifespan's startup checked before anything runs, every request observed
    # (refused ones too), bodies over the limit refused (api/middleware.py).
    app.add_middleware(ApiMiddleware, startup_problem=startup_problem, max_body_bytes=MAX_BODY_BYTES)
    traced(app)
    for module in (
        runs,
        interactions,
        links,
        principals,
        grants,
        workers,
        worker_protocol,
        handlers,
        webhooks,
        events,
        decision_record,
        decisions,
        run_pages,
        link_pages,
    ):
        # Any of them may find the database unreachable: 503 with Retry-After (api/errors.py).
        app.include_router(module.router, responses=errors.documented(503))
    app.include_router(health.router)  # liveness never reads the database; readiness documents its own 503
    # The docs pages last: every request is matched against the routes in order, and they are rarely asked for.
    app.router.route_class = CheckedRoute  # the app's own routes (the docs pages) are checked like the others
    docs.install(app)
    payloads.install(app)  # the start route's body, one variant per workflow this process knows
    return app


app = create_app()
