"""The one clock: the database's. Leases, expiries and re-enqueue ages are computed in the statements.

Every host's Python clock may be off (a worker ten minutes ahead would hand out leases that outlive their
time, one behind would see live leases as expired); the database's clock is the one all of them share.
``db_now()`` renders as ``now()`` on PostgreSQL: the transaction's start, a stable function, so the
planner can still use an index on ``lease_expires_at < now()`` (``clock_timestamp()`` is volatile and
would not).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from models.base import UTCDateTime


class _DbNow(FunctionElement[datetime]):
    """The database's current time, optionally plus a number of seconds (a value or a bound parameter)."""

    type = UTCDateTime()
    name = "db_now"
    inherit_cache = True


def db_now(plus_s: float | str | ColumnElement[float] | None = None) -> ColumnElement[datetime]:
    """The database's clock; ``plus_s`` seconds later when given: a number, the name of a bound parameter
    that carries the seconds (a statement built once, e.g. the claim's ``"lease_s"``), or a column of them
    (``NULL`` seconds: ``NULL``)."""
    if plus_s is None:
        return _DbNow()
    if isinstance(plus_s, str):
        return _DbNow(bindparam(plus_s, type_=Float))
    if isinstance(plus_s, ColumnElement):
        return _DbNow(plus_s)
    return _DbNow(bindparam(None, float(plus_s), type_=Float))


@compiles(_DbNow)
def _postgresql(element: _DbNow, compiler: SQLCompiler, **kw: Any) -> str:
    args = list(element.clauses)
    if not args:
        return "now()"
    return f"(now() + make_interval(secs => {compiler.process(args[0], **kw)}))"
