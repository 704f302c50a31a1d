"""Hot statements: the few Core statements every continuation runs, sent straight to the driver's cursor.

An answer's two statements, the claim and the run-ending consume spend much of their client CPU in
SQLAlchemy's execution layer (the statement's cache key and its lookup, the execution context, the result
object; bench/RESULTS.md has the figures, measured beside a plain psycopg cursor). These
statements need none of it. A ``HotStatement`` is compiled once per dialect; each execution fills the
parameters through the same bind processors SQLAlchemy would use, converts the rows through the same
result processors, fires the engine's cursor-execute events when someone listens (the benchmarks'
statement counts), and wraps a driver error as SQLAlchemy does, invalidating a connection that dropped.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, InvalidRequestError
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.expression import Select

Processor = Callable[[Any], Any]


@dataclass(frozen=True)
class _Bind:
    name: str  # in the SQL
    key: str  # in the parameters given
    bind: BindParameter[Any]
    process: Processor | None


@dataclass(frozen=True)
class _Compiled:
    compiled: SQLCompiler
    sql: str
    binds: tuple[_Bind, ...]
    results: tuple[Processor | None, ...] | None  # per result column; None when no column needs one
    row: Any  # the namedtuple class of a result row

    def parameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """What ``SQLCompiler.construct_params`` makes of ``given`` (a value by the bind's key, else by its
        name in the SQL, else the bind's own value; a required one missing is refused), then each bind's
        processor: its loop, planned once (construct_params per execution showed in the worker's profile)."""
        params = {}
        for b in self.binds:
            if b.key in given:
                value = given[b.key]
            elif b.name in given:
                value = given[b.name]
            elif b.bind.required:
                raise InvalidRequestError(f"A value is required for bind parameter {b.key!r}", code="cd3x")
            else:
                value = b.bind.effective_value if b.bind.callable else b.bind.value
            params[b.name] = value if b.process is None else b.process(value)
        return params

    def rows(self, raw: list[tuple[Any, ...]]) -> list[Any]:
        make = self.row._make
        if self.results is None:
            return [make(values) for values in raw]
        results = self.results
        return [make(p(v) if p is not None else v for p, v in zip(results, values, strict=True)) for values in raw]


def _compile(statement: Select[Any], dialect: Dialect) -> _Compiled:
    compiled = statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    if compiled.positional or "POSTCOMPILE" in compiled.string or getattr(compiled, "_collected_params", None):
        raise ValueError(f"a hot statement needs named parameters bound as given ({dialect.name} has not)")
    binds: dict[str, _Bind] = {}
    for bind, name in compiled.bind_names.items():
        name = compiled.escaped_bind_names.get(name, name)
        if name not in binds:
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            binds[name] = _Bind(name=name, key=str(bind.key), bind=bind, process=process)
    columns = list(statement.selected_columns)
    results = tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns)
    keys = [str(column.key) for column in columns]
    return _Compiled(
        compiled=compiled,
        sql=compiled.string,
        binds=tuple(binds.values()),
        results=results if any(p is not None for p in results) else None,
        row=namedtuple("HotRow", keys),  # raises for a key that is no identifier
    )


class HotStatement:
    """A Core ``SELECT`` (its CTEs may write) run on the driver's cursor of a connection (PostgreSQL)."""

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    def _for(self, dialect: Dialect) -> _Compiled:
        found = self._by_dialect.get(dialect.name)
        if found is None:
            found = self._by_dialect[dialect.name] = _compile(self.statement, dialect)
        return found

    def rows(self, on: Connection | Session, params: Mapping[str, Any]) -> list[Any]:
        """Execute with ``params`` in the connection's (or session's) transaction; every row, as named
        tuples with the statement's column keys."""
        conn = on if isinstance(on, Connection) else on.connection()
        dialect = conn.dialect
        compiled = self._for(dialect)
        parameters = compiled.parameters(params)
        driver = conn.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        events = conn.dispatch
        try:
            if events.before_cursor_execute:
                events.before_cursor_execute(conn, cursor, compiled.sql, parameters, None, False)
            cursor.execute(compiled.sql, parameters)
            # A SELECT always has a result set (not asking ``cursor.description``, which builds a column
            # object per result column on every call: a fifth of the claim's client time in the driver).
            raw = cursor.fetchall()
            if events.after_cursor_execute:
                events.after_cursor_execute(conn, cursor, compiled.sql, parameters, None, False)
        except dialect.loaded_dbapi.Error as exc:
            dropped = dialect.is_disconnect(exc, driver, cursor)
            if dropped:
                conn.invalidate(exc)
            raise DBAPIError.instance(
                compiled.sql,
                parameters,
                exc,
                dialect.loaded_dbapi.Error,
                connection_invalidated=dropped,
                dialect=dialect,
            ) from exc
        finally:
            cursor.close()
        return compiled.rows(raw)

    def first(self, on: Connection | Session, params: Mapping[str, Any]) -> Any | None:
        rows = self.rows(on, params)
        return rows[0] if rows else None
