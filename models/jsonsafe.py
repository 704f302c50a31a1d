"""What Parkway accepts as a JSON value to store: one rule for the API's bodies and the workers' outcomes.

A value is storable when it is made of ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` (or
``tuple``) and ``dict`` with ``str`` keys, nested at most ``max_depth`` deep, and no string (key or value)
holds a NUL (PostgreSQL's text and ``jsonb`` refuse it) or a surrogate code point (it has no UTF-8 form:
a lone ``"\\ud800"`` from a JSON body, or a pair a Python literal left split). ``NaN`` and the infinities
are not JSON. The check walks the value without recursion, so no depth of nesting can overflow it.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 64  # containers inside containers, at most (the JSON encoder recurses once per level)


def json_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """The first reason ``value`` cannot be stored as JSON, as a phrase naming where (``$.a[2]``), or
    ``None`` when it can. The phrase never quotes a string of the value (it may be a secret)."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, where, depth = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{where}: {item!r} is not a JSON number"
            continue
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{where}: {problem}"
            continue
        if isinstance(item, list | tuple | dict):
            if depth >= max_depth:
                return f"{where}: nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, child in reversed(list(item.items())):
                    if not isinstance(key, str):
                        return f"{where}: a key of type {type(key).__name__} (JSON object keys are strings)"
                    problem = text_problem(key)
                    if problem is not None:
                        return f"{where}: a key {problem}"
                    stack.append((child, f"{where}.{_show(key)}", depth + 1))
            else:
                stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in reversed(list(enumerate(item))))
            continue
        return f"{where}: a {type(item).__name__} is not a JSON value"
    return None


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored (a NUL, a surrogate), or ``None``."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (no UTF-8 form)"
    return None


def storable_text(text: str) -> str:
    """``text`` with each NUL and surrogate replaced by U+FFFD (for messages built from exceptions)."""
    if text_problem(text) is None:
        return text
    return "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)


def _show(key: str) -> str:
    """A key as a path segment: plain when it is an identifier, else quoted (and cut when long)."""
    if key.isidentifier() and len(key) <= 40:
        return key
    return repr(key if len(key) <= 40 else key[:40] + "…")
