"""The statements of the hot path (a claim, a run-ending consume, an answer's read and its write, a principal
read by name), run on the connection's psycopg cursor.

SQLAlchemy compiles each once per dialect, at first use; an execution then costs what psycopg costs: no
execution context or result object per statement (about half the claim's client CPU). Only public APIs:
``Compiled.string`` and its binds, the types' bind and result processors, the pooled connection's
``driver_connection``; a driver error is raised as SQLAlchemy's exception of the same PEP 249 class (a
dropped connection invalidated first), so callers see what ``Connection.execute`` would raise. Cursor
events are not fired for these statements.

Still needed: the claim, the consumes, the park and the lease are still Core statements of data-modifying
CTEs, built and compiled by SQLAlchemy, and this keeps their execution at psycopg's cost. The answer and
every closing of a wait are server-side functions (migration 0027), run by ``call``: one ``execute`` of a
fixed text, with the same error translation. The module goes once the other transitions are functions too.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NoReturn, cast

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Select

Processor = Callable[[Any], Any]
_PEP249 = ("IntegrityError", "DataError", "OperationalError", "ProgrammingError", "InternalError",
           "NotSupportedError", "InterfaceError", "DatabaseError")  # fmt: skip


@dataclass(frozen=True)
class _Bind:
    name: str
    default: Any
    required: bool
    process: Processor | None
    compute: Callable[[], Any] | None = None  # a ``callable_`` bind's: called per execution


@dataclass(frozen=True)
class _Plan:
    sql: str
    binds: tuple[_Bind, ...]
    results: tuple[Processor | None, ...] | None  # per result column; None when no column needs one
    row: Any  # the namedtuple class of a result row


def _plan(statement: Select[Any], dialect: Dialect) -> _Plan:
    compiled = statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    binds: dict[str, _Bind] = {}
    for bind, name in compiled.bind_names.items():
        if f"%({name})s" not in compiled.string:  # a name the dialect escaped, or a parameter rendered later
            raise ValueError(f"bind {name!r} is not sent as named: not a driver statement")
        if name not in binds:
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            compute = bind.callable  # a value read at each execution (the current trace's: models/store/sql.py)
            binds[name] = _Bind(name, None if compute else bind.value, bind.required and compute is None, process,
                                compute)  # fmt: skip
    columns = list(statement.selected_columns)
    results = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns)
    return _Plan(
        sql=compiled.string,
        binds=tuple(binds.values()),
        results=results if any(p is not None for p in results) else None,
        row=namedtuple("DriverRow", [str(c.key) for c in columns]),  # keys known once it is built
    )


def _sqlalchemy_error(error: psycopg.Error, sql: str, params: Mapping[str, Any], dropped: bool) -> exc.DBAPIError:
    """``error`` as the SQLAlchemy exception ``Connection.execute`` raises for it."""
    name = next((k.__name__ for k in type(error).__mro__ if k.__name__ in _PEP249), "DatabaseError")
    cls: type[exc.DBAPIError] = getattr(exc, name)
    return cls(sql, dict(params), error, connection_invalidated=dropped)


def _cursor(conn: Connection, rows: Any = None) -> psycopg.Cursor[Any]:
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return driver.cursor(row_factory=rows) if rows is not None else driver.cursor()


_KEPT = "parkway.driver_cursors"  # the pooled connection's ``info`` key of the cursors ``rows`` keeps on it


def _kept_cursor(conn: Connection, sql: str, rows: Any = None) -> psycopg.Cursor[Any]:
    """The cursor kept on this pooled connection for the statement ``sql``, made at its first execution there
    (SQLAlchemy clears ``info`` when it replaces a connection it found dead). psycopg keeps a cursor's
    adaptation (the dumpers of the parameters' types, the loaders of the result's columns) while the same
    query object runs on it again: each statement of the hot path on a cursor of its own looks them up once
    per connection, not per execution. (A kept cursor holds its last result until its next execution.)
    ``rows``: its row factory (psycopg's default, tuples, when ``None``)."""
    kept: dict[str, psycopg.Cursor[Any]] = conn.connection.info.setdefault(_KEPT, {})
    cursor = kept.get(sql)
    if cursor is None:
        cursor = kept[sql] = _cursor(conn, rows)
    return cursor


def _raise(
    conn: Connection,
    cursor: psycopg.Cursor[Any],
    error: psycopg.Error,
    sql: str,
    params: Mapping[str, Any],
    hide: bool = False,
) -> NoReturn:
    """``error`` raised as the SQLAlchemy exception ``Connection.execute`` raises for it (a dropped connection
    invalidated first); ``hide``: without the parameters (they may hold an answer's value)."""
    # The driver's own objects, typed by SQLAlchemy only as PEP 249 ones.
    dropped = conn.dialect.is_disconnect(cast(Any, error), conn.connection, cast(Any, cursor))
    if dropped:
        conn.invalidate(error)
    raise _sqlalchemy_error(error, sql, {} if hide else params, dropped) from error


def call(on: Connection | Session, sql: str, params: Mapping[str, Any]) -> Any:
    """The first row (a named tuple of the result's columns) of ``sql``, a fixed text calling a server-side
    function, run once on the connection's psycopg cursor kept for it (``_kept_cursor``) in its transaction
    (or in autocommit). Its errors are raised without the parameters."""
    conn = on if isinstance(on, Connection) else on.connection()
    cursor = _kept_cursor(conn, sql, namedtuple_row)
    try:
        cursor.execute(sql, params)
        return cursor.fetchone()
    except psycopg.Error as error:
        _raise(conn, cursor, error, sql, params, hide=True)


def in_autocommit(on: Connection | Session) -> bool:
    """Whether each statement on this connection commits on its own (no transaction holds a lock past it)."""
    conn = on if isinstance(on, Connection) else on.connection()
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return driver.autocommit


class DriverStatement:
    """A Core ``SELECT`` (its CTEs may write) run on the psycopg cursor of a connection, in its transaction
    (or in autocommit); ``build`` makes it at its first use, not at import."""

    def __init__(self, build: Callable[[], Select[Any]]) -> None:
        self.build = build
        self.plans: dict[str, _Plan] = {}

    @cached_property
    def statement(self) -> Select[Any]:
        return self.build()

    def rows(self, on: Connection | Session, given: Mapping[str, Any]) -> list[Any]:
        """Execute with ``given`` in the connection's (or session's) transaction; every row, as named tuples
        with the statement's column keys."""
        conn = on if isinstance(on, Connection) else on.connection()
        plan = self.plans.get(conn.dialect.name)
        if plan is None:
            plan = self.plans[conn.dialect.name] = _plan(self.statement, conn.dialect)
        params: dict[str, Any] = {}
        for b in plan.binds:
            if b.name in given:
                value = given[b.name]
            elif b.compute is not None:
                value = b.compute()
            elif b.required:
                raise exc.ArgumentError(f"a value is required for bind parameter {b.name!r}")
            else:
                value = b.default
            params[b.name] = value if b.process is None else b.process(value)
        cursor = _kept_cursor(conn, plan.sql)
        try:
            cursor.execute(plan.sql, params)
            raw = cursor.fetchall()  # a SELECT always has a result set
        except psycopg.Error as error:
            _raise(conn, cursor, error, plan.sql, params)
        row, results = plan.row, plan.results
        if results is None:
            return [row(*values) for values in raw]
        return [row(*(p(v) if p is not None else v for p, v in zip(results, values, strict=True))) for values in raw]

    def first(self, on: Connection | Session, given: Mapping[str, Any]) -> Any | None:
        rows = self.rows(on, given)
        return rows[0] if rows else None
