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

from email.message import Message

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from models.jsonsafe import json_problem, text_problem


def _is_json(content_type: str | None) -> bool:
    """What FastAPI reads as JSON: ``application/json`` or ``application/*+json``."""
    if not content_type:
        return False
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _strings_problem(request: Request) -> tuple[tuple[str, ...], str] | None:
    sources = (
        ("path", request.path_params.items()),
        ("query", request.query_params.multi_items()),
        ("header", request.headers.items()),
    )
    for where, pairs in sources:
        for name, value in pairs:
            for text in (name, value):
                problem = text_problem(text) if isinstance(text, str) else None
                if problem is not None:
                    shown = name.encode("ascii", "backslashreplace").decode()[:40]
                    return (where, shown), problem
    return None


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
