"""What Parkway accepts as a JSON value to store: one rule for the API's bodies, the SDK and the workers' outcomes.

A value is storable when it is made of ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` (or
``tuple``) and ``dict`` with ``str`` keys, nested at most ``MAX_DEPTH`` deep, and no string (key or value)
holds a NUL (PostgreSQL's text and ``jsonb`` refuse it) or a surrogate code point (it has no UTF-8 form:
a lone ``"\\ud800"`` from a JSON body, or a pair a Python literal left split). ``NaN``, the infinities and
``1e400`` (read as ``inf``) are not JSON numbers. Both passes walk without recursion, so any depth is safe.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from parkway.errors import ParkwayError

MAX_DEPTH = 64  # containers inside containers, at most (the JSON encoder recurses once per level)

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_SCALARS = (type(None), bool, int)


class InvalidInput(ParkwayError, ValueError):
    """Raised by the SDK when a value it is handed is not JSON Parkway can store; nothing was stored."""


def require_storable(value: Any, what: str) -> None:
    """Raise ``InvalidInput`` naming ``what`` when ``value`` fails ``json_problem``."""
    problem = json_problem(value)
    if problem is not None:
        raise InvalidInput(f"{what} is not JSON Parkway can store: {problem}")


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored or compared (a NUL, a surrogate), or ``None``."""
    found = _BAD_CHARS.search(text)
    if found is None:
        return None
    return "contains a NUL character" if found.group() == "\x00" else "contains a lone surrogate (no UTF-8 form)"


def storable_text(text: str) -> str:
    """``text`` with each NUL and surrogate replaced by U+FFFD (for messages built from exceptions)."""
    return _BAD_CHARS.sub("\ufffd", text)


def json_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """The first reason ``value`` cannot be stored as JSON, as a phrase naming where (``$.a[2]``), or
    ``None`` when it can. The phrase never quotes a string of the value (it may be a secret)."""
    if _acceptable(value, max_depth):
        return None
    return _first_problem(value, max_depth)


def _acceptable(value: Any, max_depth: int) -> bool:
    """The quick pass, over every request body: only containers are stacked, nothing is spelled out."""
    bad, finite = _BAD_CHARS.search, math.isfinite
    stack: list[tuple[Any, int]] = [([value], -1)]
    while stack:
        container, depth = stack.pop()
        if depth >= max_depth:
            return False
        if type(container) is dict:
            if any(type(key) is not str or bad(key) for key in container):
                return False
            items: Any = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind is str:
                if "\x00" in item or (not item.isascii() and bad(item)):
                    return False
            elif kind is float:
                if not finite(item):
                    return False
            elif kind is dict or kind is list or kind is tuple:
                stack.append((item, depth + 1))
            elif kind not in _SCALARS:  # a subclass or a non-JSON type: let the careful pass judge
                return False
    return True


def _first_problem(value: Any, max_depth: int) -> str | None:
    """The careful pass, once the quick one found something: the first problem and where it is."""
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
        if not isinstance(item, list | tuple | dict):
            return f"{where}: a {type(item).__name__} is not a JSON value"
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
    return None


def _show(key: str) -> str:
    """A key as a path segment: plain when it is an identifier, else quoted (and cut when long)."""
    if key.isidentifier() and len(key) <= 40:
        return key
    return repr(key if len(key) <= 40 else key[:40] + "…")


def canonical_json(value: Any) -> str:
    """One text per JSON value (sorted keys, no spaces): what digests and deterministic ids are made of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def interaction_id(step_id: str, key: str, kind: str, resources: Iterable[str] | None) -> str:
    """Deterministic id from (step, key, kind, resource set): a re-park rejoins the same row."""
    material = canonical_json([step_id, key, kind, sorted(set(resources or ()))])
    return hashlib.sha256(material.encode()).hexdigest()[:32]
