"""What JSON may carry into Parkway: one check for every value the API or the SDK is handed to store.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``1e400`` (as ``inf``) and ``"\\ud800"`` (a lone
surrogate), none of which PostgreSQL's ``jsonb`` or UTF-8 can hold; text columns and ``jsonb`` strings
cannot hold NUL; and a value nested deeper than ``MAX_DEPTH`` is refused before anything recurses on it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from parkway.errors import ParkwayError

MAX_DEPTH = 64

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """Why this string cannot be stored or compared (NUL, a lone surrogate), or ``None``."""
    found = _BAD_CHARS.search(text)
    if found is None:
        return None
    char = found.group()
    return "contains NUL" if char == "\x00" else f"contains a lone surrogate (U+{ord(char):04X})"


def json_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` (as ``json.loads`` makes it) is not JSON Parkway can store, or ``None``.

    The answer says where: ``"at /a/0: contains NUL"``. Iterative, so any depth is safe to check.
    """
    if _acceptable(value, max_depth):
        return None
    return _first_problem(value, max_depth)


def _acceptable(value: Any, max_depth: int) -> bool:
    """The quick pass (a few hundred ns per item): only containers are stacked."""
    bad, finite = _BAD_CHARS.search, math.isfinite
    stack: list[tuple[Any, int]] = [([value], -1)]
    while stack:
        container, depth = stack.pop()
        if depth >= max_depth:
            return False
        if type(container) is dict:
            if any(type(key) is str and bad(key) for key in container):
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
            elif kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif isinstance(item, str | float | dict | list):  # a subclass: let the careful pass judge
                return False
    return True


def _first_problem(value: Any, max_depth: int) -> str | None:
    """The careful pass, once the quick one found something: the first problem with where it is."""
    # (item, its parent's entry, its key there, depth): the path is spelled out only for a problem found
    stack: list[tuple[Any, Any, Any, int]] = [(value, None, None, 0)]
    while stack:
        entry = stack.pop()
        item, depth = entry[0], entry[3]
        problem: str | None = None
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, float):
            problem = None if math.isfinite(item) else f"is not a finite number ({item})"
        elif isinstance(item, dict):
            if depth >= max_depth:
                problem = f"is nested deeper than {max_depth} levels"
            else:
                for key, sub in item.items():
                    if isinstance(key, str) and (bad := text_problem(key)) is not None:
                        problem = f"has a key that {bad}"
                        break
                    stack.append((sub, entry, key, depth + 1))
        elif isinstance(item, list):
            if depth >= max_depth:
                problem = f"is nested deeper than {max_depth} levels"
            else:
                stack.extend((sub, entry, index, depth + 1) for index, sub in enumerate(item))
        if problem is not None:
            return f"at {_path(entry)}: {problem}"
    return None


def _path(entry: tuple[Any, Any, Any, int]) -> str:
    """A JSON Pointer-like path of a stacked entry (keys shortened, and of printable characters only)."""
    parts: list[str] = []
    node: Any = entry
    while node is not None and node[1] is not None:
        key = str(node[2])
        parts.append(key[:40].encode("ascii", "backslashreplace").decode())
        node = node[1]
    return "/" + "/".join(reversed(parts))


class InvalidInput(ParkwayError, ValueError):
    """Raised by the SDK when a value it is handed is not JSON Parkway can store; nothing was stored."""


def require_storable(value: Any, what: str) -> None:
    """Raise ``InvalidInput`` naming ``what`` when ``value`` fails ``json_problem``."""
    problem = json_problem(value)
    if problem is not None:
        raise InvalidInput(f"{what} is not JSON Parkway can store: {problem}")
