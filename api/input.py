"""One check of what every request hands the API, before any route reads it (``checked_input``).

Python's JSON reader accepts what PostgreSQL and UTF-8 cannot hold (``NaN``, ``Infinity``, ``1e400``, lone
surrogates) and JSON strings may carry NUL, which no text column can store: left alone, each of them is a
500 from the database or the encoder, after the route had begun its work. This dependency, installed on
the app (so on every route, present and future), refuses them with 422 in the error shape, with nothing
stored: the JSON body at any depth (``models.jsonsafe``, the rules the SDK applies too), and the path and
query parameters and headers. The body is parsed once: Starlette keeps the parse on the request, and the
route reads it from there.

It runs in every route's handler (``CheckedRoute``, the route class of every router: ``checked_router``)
before FastAPI reads the request, rather than as an app-wide dependency: a dependency is solved again on
every request, and solving it cost several times the check itself.

A hot route may also be served plainly (``served_plainly``): a handler of its own that reads a request it
can take at once (the body its model accepts, the path its pattern accepts) without FastAPI's per-request
machinery, and hands every other request to FastAPI's route, which reads it as the OpenAPI says and refuses
it in the error shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from models.jsonsafe import json_problem, text_problem


def _is_json(content_type: str | None) -> bool:
    """What FastAPI reads as JSON: ``application/json`` or ``application/*+json`` (any parameters)."""
    if not content_type:
        return False
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def is_plain_json(request: Request) -> bool:
    """Whether the request's body is declared ``application/json`` (any parameters), which FastAPI reads as
    JSON too: what a handler ``served_plainly`` reads (any other type is FastAPI's to read or refuse)."""
    content_type = request.headers.get("content-type")
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


def _strings_problem(request: Request) -> tuple[tuple[str, ...], str] | None:
    # Headers arrive as bytes (read as latin-1: never a surrogate), so NUL is all there is to look for.
    for name, value in request.scope["headers"]:
        if b"\x00" in name or b"\x00" in value:
            return ("header", _shown(name.decode("latin-1"))), "contains NUL"
    sources: list[tuple[str, Iterable[tuple[str, Any]]]] = [("path", request.path_params.items())]
    if request.scope.get("query_string"):
        sources.append(("query", request.query_params.multi_items()))
    for where, pairs in sources:
        for name, value in pairs:
            for text in (name, value):
                if isinstance(text, str) and (problem := text_problem(text)) is not None:
                    return (where, _shown(name)), problem
    return None


def _shown(name: str) -> str:
    return name.encode("ascii", "backslashreplace").decode()[:40]


async def checked_input(request: Request) -> None:
    """Raise a 422 ``RequestValidationError`` for a request carrying what Parkway cannot store or compare."""
    found = _strings_problem(request)
    if found is None and _is_json(request.headers.get("content-type")) and await request.body():
        try:
            body = await request.json()  # the route's own parse, kept by Starlette: no second parse
        except Exception:
            return  # not JSON at all: the route refuses it (422) on its own
        problem = json_problem(body)
        if problem is not None:
            found = ("body",), problem
    if found is not None:
        where, problem = found
        raise RequestValidationError([{"type": "value_error", "loc": where, "msg": problem}])


Plain = Callable[[Request], Awaitable[Response | None]]
E = TypeVar("E", bound=Callable[..., Any])
_PLAIN = "__parkway_served_plainly__"


def served_plainly(plain: Plain) -> Callable[[E], E]:
    """Mark an endpoint as served by ``plain`` whenever ``plain`` gives a response (after ``checked_input``):
    ``None`` hands the request, unread by it, to FastAPI's route for the endpoint. ``plain`` must do all the
    endpoint does for a request it takes (the same checks, the same call, the same response, byte for byte),
    and take only requests the endpoint would accept: the endpoint stays the contract (the OpenAPI, every
    refusal). Its router must be included with no dependencies of the include's own: ``plain`` solves none."""

    def mark(endpoint: E) -> E:
        setattr(endpoint, _PLAIN, plain)
        return endpoint

    return mark


class CheckedRoute(APIRoute):
    """A route whose handler refuses what ``checked_input`` refuses before FastAPI reads the request, and that
    is served plainly where its endpoint says so (``served_plainly``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        plain: Plain | None = getattr(self.endpoint, _PLAIN, None)

        async def checked(request: Request) -> Response:
            await checked_input(request)
            if plain is not None and (response := await plain(request)) is not None:
                return response
            return await handler(request)

        return checked


def checked_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` whose routes are ``CheckedRoute``s: every router of the API is made here."""
    return APIRouter(route_class=CheckedRoute, **options)
