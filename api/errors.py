"""Every error the API returns, as JSON ``{"error", "detail", "state"?, "errors"?}``; the texts live here.

Store and SDK outcomes (``parkway.errors.OutcomeError``) keep their own code and state; their HTTP status
is decided here (``OUTCOME_STATUS``), not in the kernel. Validation
errors (422), unknown routes (404), wrong methods (405), too large bodies (413), a database that cannot be
reached (503 with ``Retry-After``) and unexpected failures (500) are rendered in the same shape, so a client
has one error format to read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.error_schemas import (
    ErrorBody,
    InteractionConflict,
    InteractionGone,
    RunConflict,
    ValidationErrorBody,
)
from models.cursors import InvalidCursor
from parkway.db import database_unavailable
from parkway.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidAnswer,
    InvalidOutcome,
    InvalidPayload,
    NotFound,
    OutcomeError,
    Unauthenticated,
)

log = logging.getLogger("parkway.api")

# --------------------------------------------------------------------------- texts

NO_TOKEN = "send `Authorization: Bearer <token>`"
BAD_TOKEN = "the bearer token is not valid"
WRONG_KIND = "this needs a principal of kind {kinds}; you are {kind} {name}"
RUN_FORBIDDEN = "principal {name} holds no grant on the target of run {id}"
RUN_NOT_FOUND = "run {id} does not exist"
INTERACTION_FORBIDDEN = "principal {name} holds no grant on the target of interaction {id}"
INTERACTION_NOT_FOUND = "interaction {id} does not exist"
LINKS_FORBIDDEN = (
    "principal {name} may not hand out links to interaction {id}: admins may, and the agent that owns its run "
    "while granted on the run's target"
)
LINK_NOBODY = "{name} is no live person holding a place on interaction {id} (granted on its target, or named by it)"
NAME_TAKEN = "a principal named {name!r} already exists"
UNKNOWN_PRINCIPAL = "no principal is named {name!r}"
GRANT_NOT_FOUND = "grant {id} does not exist"
PRINCIPAL_NOT_FOUND = "principal {id} does not exist"
PRINCIPAL_DISABLED = "principal {name!r} is disabled"
LAST_ADMIN = (
    "principal {id} is the last live admin: disabling it would leave no token that can manage principals and "
    "grants. Make another admin first; should no admin token work, make one where the database is reachable: "
    "`parkway token create --kind admin --name NAME`"
)
DISABLE_SELF = "an admin cannot disable itself; another admin (or `parkway token revoke`) can"
WEBHOOK_NOT_FOUND = "webhook {id} does not exist"
REPLAY_FORWARD = "a replay goes back from the subscription's cursor, never forward past it: {seq} is ahead of it"
WEBHOOK_FIELD_NULL = "url, events and links cannot be null; leave a field out to keep it"
TOO_LARGE = "the request body is larger than {limit} bytes"
NOT_READY = "not ready: {reason}"
INTERNAL = "an internal error occurred; it has been logged"
UNPARSABLE = "the body could not be parsed"
DATABASE_UNAVAILABLE = "the database cannot be reached just now; retry the request as it is (an exact retry is safe)"
RETRY_AFTER_S = 2

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    413: "too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    500: "internal",
    503: "not_ready",
}

# The HTTP status of each kernel outcome; a subclass (``WrongKind`` is a ``Forbidden``) takes its base's.
OUTCOME_STATUS: dict[type[OutcomeError], int] = {
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    InvalidAnswer: 422,
    InvalidOutcome: 422,
    InvalidPayload: 422,
}


def outcome_status(exc: OutcomeError) -> int:
    """The HTTP status for a kernel outcome: the nearest class in its MRO that has one, else 400."""
    for cls in type(exc).__mro__:
        if cls in OUTCOME_STATUS:
            return OUTCOME_STATUS[cls]
    return 400


class ApiError(Exception):
    """Raised by routes and dependencies for an HTTP error with the API's JSON shape."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        code: str | None = None,
        state: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.code = code or STATUS_CODES.get(status_code, "error")
        self.detail = detail
        self.state = state
        self.headers = headers


def error_response(
    status_code: int,
    code: str,
    detail: str,
    *,
    state: dict[str, Any] | None = None,
    errors: list[str] | None = None,
    headers: dict[str, str] | None = None,
    problems: list[dict[str, Any]] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if state is not None:
        body["state"] = jsonable_encoder(state)
    if errors is not None:
        body["errors"] = errors
    if problems is not None:
        body["problems"] = problems
    return JSONResponse(body, status_code=status_code, headers=headers)


# --------------------------------------------------------------------------- OpenAPI

DESCRIPTIONS = {
    401: "No bearer token, or a token that is not valid.",
    403: "The principal is of the wrong kind, or holds no live grant on the target.",
    404: "No such resource.",
    409: "Another response won (or a key was reused with another body); `state` is authoritative.",
    410: "The wait ended without an answer; `state` is the interaction with `run_status`.",
    413: "The request body is larger than 1 MiB.",
    422: "The request (or the answer's value) is not valid; nothing was stored.",
    503: "The database cannot be reached for now (`Retry-After` says when to retry; an exact retry is safe), "
    "or the process is not ready; `detail` says why.",
}


# The body of each error code, where it is not the plain ``ErrorBody``; routes name their 409/410 models.
MODELS: dict[int, type[BaseModel]] = {422: ValidationErrorBody}
INTERACTION_OUTCOMES: dict[int, type[BaseModel]] = {409: InteractionConflict, 410: InteractionGone}
RUN_OUTCOMES: dict[int, type[BaseModel]] = {409: RunConflict}


def documented(*codes: int, models: dict[int, type[BaseModel]] | None = None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error codes: ``models`` (a route's own), else ``MODELS``, else
    ``ErrorBody``."""
    chosen = {**MODELS, **(models or {})}
    return {code: {"model": chosen.get(code, ErrorBody), "description": DESCRIPTIONS[code]} for code in codes}


# --------------------------------------------------------------------------- handlers


def _validation_messages(exc: RequestValidationError, content_type: str) -> list[str]:
    messages = []
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        if error.get("type") == "json_invalid":  # its loc ends with the character where parsing stopped
            why = (error.get("ctx") or {}).get("error", "")
            at = f" at character {loc[1]}" if len(loc) > 1 else ""
            messages.append(f"body: not valid JSON{at}" + (f": {why}" if why else ""))
            continue
        messages.append(f"{'.'.join(str(part) for part in loc)}: {error.get('msg', 'invalid')}")
    if content_type and "json" not in content_type and any(m.startswith("body") for m in messages):
        # curl -d without -H sends a form: say what was sent and what is read
        messages.insert(0, f"body: sent as {content_type.split(';')[0]}; send Content-Type: application/json")
    return messages[:50]


async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Authentication comes first: a request without a valid token learns nothing, not even its 422.
    # The check comes from ``install`` (api.deps imports this module, so this one cannot import it back).
    authentication_problem: Callable[[Request], ApiError | None] = request.app.state.authentication_problem
    try:
        problem = await run_in_threadpool(authentication_problem, request)
    except Exception as failure:
        if not database_unavailable(failure):
            raise
        return _unavailable(request, failure)
    if problem is not None:
        return _on_api_error(request, problem)
    json_api = request.url.path.startswith("/v1/")  # the routes whose bodies are JSON (the pages post forms)
    messages = _validation_messages(exc, request.headers.get("content-type", "") if json_api else "")
    detail = "the request is not valid: " + "; ".join(messages[:3]) if messages else "the request is not valid"
    return error_response(422, "validation_error", detail, errors=messages)


def _on_api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status_code, exc.code, exc.detail, state=exc.state, headers=exc.headers)


async def _on_api_error_async(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _on_api_error(request, exc)


async def _on_outcome(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OutcomeError)
    errors = exc.errors if isinstance(exc, InvalidAnswer | InvalidPayload) else None
    problems = exc.problems if isinstance(exc, InvalidPayload) else None
    return error_response(outcome_status(exc), exc.code, exc.detail, state=exc.state, errors=errors, problems=problems)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # A body that cannot be parsed (not UTF-8, a broken form) is invalid like broken JSON: 422.
        return await _on_validation(request, RequestValidationError([{"loc": ("body",), "msg": UNPARSABLE}]))
    code = STATUS_CODES.get(exc.status_code, "error")
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = getattr(exc, "headers", None)
    if exc.status_code == 404 and detail == "Not Found":
        detail = "no such resource"
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request)}
    return error_response(exc.status_code, code, detail, headers=headers)


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> str:
    """Every method the request's path is served with, for ``Allow``: Starlette names only those of the
    first route whose path matched, and a path's methods are often routes of their own."""
    routes = request.app.router.routes
    served = (m for m in METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes))
    return ", ".join(served)


def _unavailable(request: Request, exc: BaseException) -> JSONResponse:
    # One line, no traceback: an outage is an operational event, not a bug (the driver's message says which).
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    why = (str(cause).strip().splitlines() or [""])[0][:300]
    log.warning("database unavailable on %s %s: %s: %s", request.method, request.url.path, type(cause).__name__, why)
    return error_response(503, "unavailable", DATABASE_UNAVAILABLE, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _on_database(request: Request, exc: Exception) -> JSONResponse:
    if database_unavailable(exc):
        return _unavailable(request, exc)
    return await _on_unexpected(request, exc)


async def _on_invalid_cursor(_: Request, exc: Exception) -> JSONResponse:
    """A list's ``?cursor=`` this API did not hand out: 422, wherever the list reads it."""
    return error_response(422, "invalid_cursor", str(exc))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    if database_unavailable(exc):  # raised outside SQLAlchemy's own wrapping, e.g. from a dependency's pool
        return _unavailable(request, exc)
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", INTERNAL)


def install(app: FastAPI, authentication_problem: Callable[[Request], ApiError | None]) -> None:
    """Register the handlers that give every error the API's JSON shape; ``authentication_problem`` says
    why a request is not authenticated (or ``None``), so that a 422 is only told to an authenticated caller."""
    app.state.authentication_problem = authentication_problem
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error_async)
    app.add_exception_handler(OutcomeError, _on_outcome)
    app.add_exception_handler(InvalidCursor, _on_invalid_cursor)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    for database_error in (DBAPIError, DisconnectionError, PoolTimeout):
        app.add_exception_handler(database_error, _on_database)
    app.add_exception_handler(Exception, _on_unexpected)
