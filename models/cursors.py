"""Paging cursors: opaque to callers, and read strictly. A cursor this code did not hand out (altered,
made up, or carrying text no row can hold: a NUL, a lone surrogate) is refused with ``InvalidCursor``
before any of it reaches a statement."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from models.jsonsafe import text_problem
from parkway.errors import ParkwayError


class InvalidCursor(ParkwayError, ValueError):
    """Raised when a paging cursor was not produced by this API (or was altered)."""


def position_cursor(at: datetime, id_: str) -> str:
    """The cursor of a row in a list ordered by (time, id)."""
    return _encode(json.dumps([at.isoformat(), id_], separators=(",", ":")))


def read_position(cursor: str) -> tuple[datetime, str]:
    """The (time, id) of ``position_cursor``; ``InvalidCursor`` for anything else."""
    try:
        at, id_ = json.loads(_decode(cursor))
        parsed = datetime.fromisoformat(at)
        if not isinstance(id_, str) or parsed.tzinfo is None or text_problem(id_) is not None:
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise _refused(cursor) from exc
    return parsed, id_


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
