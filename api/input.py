"""One check of what every request hands the API, before any route reads it (``checked_input``).

Python's JSON reader accepts what PostgreSQL and UTF-8 cannot hold (``NaN``, ``Infinity``, ``1e400``, lone
surrogates) and JSON strings may carry NUL, which no text column can store: left alone, each of them is a
500 from the database or the encoder, after the route had begun its work. This dependency, installed on
the app (so on every route, present and future), refuses them with 422 in the error shape, with nothing
stored: the JSON body at any depth (``models.jsonsafe``, the rules the SDK applies too), and the path and
query parameters and headers. The body is the one FastAPI already parsed for the route (Starlette keeps
it on the request), so it is not parsed twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from models.jsonsafe import json_problem, text_problem


def _is_json(content_type: str | None) -> bool:
    """What FastAPI reads as JSON: ``application/json`` or ``application/*+json`` (any parameters)."""
    if not content_type:
        return False
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


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
