"""The statements of the hot path (a claim, a run-ending consume, an answer's read and its write, a principal
read by name), run on the connection's psycopg cursor.

SQLAlchemy compiles each once per dialect, at first use; an execution then costs what psycopg costs: no
execution context or result object per statement (about half the claim's client CPU). Only public APIs:
``Compiled.string`` and its binds, the types' bind and result processors, the pooled connection's
``driver_connection``; a driver error is raised as SQLAlchemy's exception of the same PEP 249 class (a
dropped connection invalidated first), so callers see what ``Connection.execute`` would raise. Cursor
events are not fired for these statements.

Still needed after issue 42's first lever (the transitions are still Core statements of data-modifying CTEs,
built and compiled by SQLAlchemy): it is what keeps their execution at psycopg's cost. It goes when each hot
transition is a server-side function (issue 42 item 2), called by one psycopg ``execute`` of a fixed text.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import psycopg
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
        row=namedtuple("DriverRow", [str(c.key) for c in columns]),  # keys known at import
    )


def _sqlalchemy_error(error: psycopg.Error, sql: str, params: Mapping[str, Any], dropped: bool) -> exc.DBAPIError:
    """``error`` as the SQLAlchemy exception ``Connection.execute`` raises for it."""
    name = next((k.__name__ for k in type(error).__mro__ if k.__name__ in _PEP249), "DatabaseError")
    cls: type[exc.DBAPIError] = getattr(exc, name)
    return cls(sql, dict(params), error, connection_invalidated=dropped)


class DriverStatement:
    """A Core ``SELECT`` (its CTEs may write) run on the psycopg cursor of a connection, in its transaction
    (or in autocommit)."""

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        self.plans: dict[str, _Plan] = {}

    def rows(self, on: Connection | Session, given: Mapping[str, Any]) -> list[Any]:
        """Execute with ``given`` in the connection's (or session's) transaction; every row, as named tuples
        with the statement's column keys."""
        conn = on if isinstance(on, Connection) else on.connection()
        dialect = conn.dialect
        plan = self.plans.get(dialect.name)
        if plan is None:
            plan = self.plans[dialect.name] = _plan(self.statement, dialect)
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
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        cursor = driver.cursor()
        try:
            cursor.execute(plan.sql, params)
            raw = cursor.fetchall()  # a SELECT always has a result set
        except psycopg.Error as error:
            # The driver's own objects, typed by SQLAlchemy only as PEP 249 ones.
            dropped = dialect.is_disconnect(cast(Any, error), conn.connection, cast(Any, cursor))
            if dropped:
                conn.invalidate(error)
            raise _sqlalchemy_error(error, plan.sql, params, dropped) from error
        finally:
            cursor.close()
        row, results = plan.row, plan.results
        if results is None:
            return [row(*values) for values in raw]
        return [row(*(p(v) if p is not None else v for p, v in zip(results, values, strict=True))) for values in raw]

    def first(self, on: Connection | Session, given: Mapping[str, Any]) -> Any | None:
        rows = self.rows(on, given)
        return rows[0] if rows else None
