"""Paging cursors: opaque to callers, and read strictly. A cursor this code did not hand out (altered,
made up, or carrying text no row can hold: a NUL, a lone surrogate) is refused with ``InvalidCursor``
before any of it reaches a statement."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

from models.jsonsafe import text_problem
from parkway.errors import ParkwayError


class InvalidCursor(ParkwayError, ValueError):
    """Raised when a paging cursor was not produced by this API (or was altered)."""


def position_cursor(at: datetime, id_: str, place: int | None = None) -> str:
    """The cursor of a row in a list ordered by (time, id), or by (time, place, id) given its ``place``."""
    values = [at.isoformat(), id_] if place is None else [at.isoformat(), place, id_]
    return _encode(json.dumps(values, separators=(",", ":")))


def read_position(cursor: str) -> tuple[datetime, str]:
    """The (time, id) of ``position_cursor``; ``InvalidCursor`` for anything else."""
    at, id_ = _read_values(cursor, 2)
    return at, id_


def read_placed_position(cursor: str) -> tuple[datetime, int, str]:
    """The (time, place, id) of ``position_cursor`` given a place; ``InvalidCursor`` for anything else."""
    at, place, id_ = _read_values(cursor, 3)
    if not isinstance(place, int) or isinstance(place, bool) or not 0 <= place < 2**31:
        raise _refused(cursor)
    return at, place, id_


def ranked_cursor(rank: int, at: datetime, id_: str, place: int) -> str:
    """The cursor of a row in a list ordered by (rank, time, place, id): a list of pages shown in turn."""
    return _encode(json.dumps([at.isoformat(), rank, place, id_], separators=(",", ":")))


def read_ranked_position(cursor: str) -> tuple[int, tuple[datetime, int, str]]:
    """The rank and (time, place, id) of ``ranked_cursor``; ``InvalidCursor`` for anything else."""
    at, rank, place, id_ = _read_values(cursor, 4)
    for number in (rank, place):
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < 2**31:
            raise _refused(cursor)
    return rank, (at, place, id_)


def _read_values(cursor: str, n: int) -> list[Any]:
    """The ``n`` values of a position cursor, its time parsed and its id checked."""
    try:
        values = json.loads(_decode(cursor))
        if not isinstance(values, list) or len(values) != n:
            raise ValueError(cursor)
        parsed, id_ = datetime.fromisoformat(values[0]), values[-1]
        if not isinstance(id_, str) or parsed.tzinfo is None or text_problem(id_) is not None:
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise _refused(cursor) from exc
    return [parsed, *values[1:]]


def text_cursor(text: str) -> str:
    """The cursor of a row in a list ordered by one text column (a name)."""
    return _encode(text)


def read_text(cursor: str) -> str:
    """The text of ``text_cursor``; ``InvalidCursor`` for anything else."""
    try:
        text = _decode(cursor)
    except ValueError as exc:
        raise _refused(cursor) from exc
    if not text or text_problem(text) is not None:
        raise _refused(cursor)
    return text


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(cursor: str) -> str:
    """The text inside a cursor; a ``ValueError`` (``binascii.Error``, ``UnicodeDecodeError``) when it is
    not base64 of UTF-8."""
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


def _refused(cursor: str) -> InvalidCursor:
    return InvalidCursor(f"cursor {cursor[:40]!r} is not one this API handed out")
