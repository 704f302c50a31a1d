"""Engines and sessions on PostgreSQL: one engine per process (never shared across fork)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, configure_mappers, sessionmaker

from parkway.pgconn import connect_args as connect_args  # beside the plain connections; their callers import here
from parkway.pgconn import normalize_url as normalize_url
from parkway.settings import get_settings

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "engine": None, "factory": None, "relaxed": None}


def make_engine(url: str, *, durable: bool = True) -> Engine:
    """Create an engine on PostgreSQL through psycopg 3, its idle connections pinged before use, its
    sessions set up by ``connect_args``."""
    engine = create_engine(normalize_url(url), connect_args=connect_args(durable=durable), **pool_options())
    _ping_when_idle(engine)
    return engine


def pool_options() -> dict[str, int]:
    """PostgreSQL pool sizing: ``PARKWAY_DB_POOL_SIZE`` connections kept open per engine, 10 more for a
    burst. Keep it at or above the process's concurrent transactions (the API's busy request threads):
    an overflow connection is closed when returned, and opening one costs a PostgreSQL backend start."""
    return {"pool_size": get_settings().db_pool_size, "max_overflow": 10}


# A pooled connection idle for longer than this is pinged before use; one in use moments ago is not (the
# ping is a round trip, a large share of a short transaction's cost).
PING_AFTER_IDLE_S = 2.0


# When this process last saw a connection invalidated (a statement found it dead: the database restarted or
# the network dropped it): every pooled connection last used before then is pinged before its next use.
_last_invalidated: list[float] = [0.0]


def _suspect(last_used: float) -> bool:
    """Whether a connection last used at ``last_used`` (monotonic) must be pinged before it is used."""
    return time.monotonic() - last_used >= PING_AFTER_IDLE_S or last_used <= _last_invalidated[0]


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping``, but only for connections idle for ``PING_AFTER_IDLE_S`` or last used before a
    connection of this process was found dead: a dead one (the database restarted) is replaced before use.
    Only a restart within that window reaches a statement, which then fails with the disconnect (the
    caller's transaction rolls back; the API answers 503) and from then on every older connection is
    pinged before use: of the connections a restart killed, only the first one found reaches a caller.
    (SQLAlchemy's own executions also mark the whole pool stale on a disconnect; the hot path's driver
    (models/store/driver.py) invalidates just its connection, and this covers the rest.)"""

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "invalidate")
    def _on_invalidate(_dbapi_conn: Any, _record: Any, _exception: Any) -> None:
        _last_invalidated[0] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if not _suspect(record.info.get("idle_since", 0.0)):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)  # in autocommit: the connection is handed over outside a transaction
        except Exception as exc:
            raise DisconnectionError("connection found dead when checked out; replacing it") from exc


def get_engine() -> Engine:
    """This process's engine, made anew after a fork (the parent's pooled connections are left alone)."""
    with _lock:
        if _state["pid"] != os.getpid() or _state["engine"] is None:
            old = _state["engine"]
            for old_engine in (old, _state["relaxed"]):
                if old_engine is not None:
                    old_engine.dispose(close=False)
            engine = make_engine(get_settings().effective_database_url)
            # The ORM's mappers, configured before this process's first transaction rather than on first use
            # inside one, where it could outlast the idle-in-transaction timeout on a loaded host.
            configure_mappers()
            _state.update(
                pid=os.getpid(), engine=engine, factory=sessionmaker(engine, expire_on_commit=False), relaxed=None
            )
        engine_: Engine = _state["engine"]
        return engine_


def reset_engine() -> None:
    """Drop this process's engine (after fork, or when the settings changed)."""
    if _state["pid"] == os.getpid():
        release_held()
    else:
        _forget_held_after_fork()
    with _lock:
        for old in (_state["engine"], _state["relaxed"]):
            if old is not None:
                if _state["pid"] == os.getpid():
                    old.dispose()
                else:
                    old.dispose(close=False)
        _state.update(pid=None, engine=None, factory=None, relaxed=None)


def session_factory() -> sessionmaker[Session]:
    get_engine()
    factory: sessionmaker[Session] = _state["factory"]
    return factory


def _relaxed_factory() -> sessionmaker[Session]:
    """Sessions whose commits do not wait for the WAL flush."""
    get_engine()
    with _lock:
        if _state["relaxed"] is None:
            relaxed = make_engine(get_settings().effective_database_url, durable=False)
            _state["relaxed"] = relaxed
            _state["relaxed_factory"] = sessionmaker(relaxed, expire_on_commit=False)
        factory: sessionmaker[Session] = _state["relaxed_factory"]
        return factory


def engines() -> list[Engine]:
    """This process's engines: the durable one and the one for ``durable=False``."""
    relaxed: Engine = _relaxed_factory().kw["bind"]
    return [get_engine(), relaxed]


@contextmanager
def transaction(*, durable: bool = True) -> Iterator[Session]:
    """One unit of work: commits when the block ends, rolls back on any exception.

    ``durable=False`` is for transactions whose loss in a database crash is recovered by design: a claim
    (the continuation is claimable again and the lost claim's execution cannot consume it), a lease
    renewal, a projection flag (the sweep projects again). Their commit returns before the WAL reaches
    disk; it is visible at once, and any later durable commit (a consume, a tool intent) flushes it too.
    Call ``require_durable`` inside one that turns out to record an outcome.
    """
    factory = session_factory() if durable else _relaxed_factory()
    with factory() as session, session.begin():
        yield session


@contextmanager
def core_transaction() -> Iterator[Connection]:
    """``transaction`` (durable) on a Core connection, for a hot path whose statements are all Core (an
    answer): no ORM session around them (its creation, its unit of work, its layer over each execution)."""
    with get_engine().begin() as conn:
        yield conn


@contextmanager
def open_transaction() -> Iterator[Connection]:
    """A durable transaction on a Core connection that the caller ends itself (``conn.commit()``) at any
    point of the block; rolled back if still open when the block ends, and the connection returned."""
    with get_engine().connect() as conn:
        conn.begin()
        yield conn


# The main thread's autocommit connections, one per engine kind (durable or not), kept checked out between
# ``single_statement`` calls: a worker process runs its tasks on its main thread, two such statements per
# continuation, and a pool checkout, the switch to autocommit and the check-in cost more client CPU than
# the statement's own execution. (durable) -> (engine, connection, monotonic time of its last use)
_held: dict[bool, tuple[Engine, Connection, float]] = {}
_inherited: list[object] = []  # a forked child's copies of its parent's held connections: never used or closed


def _forget_held_after_fork() -> None:
    # The child must neither use nor close (nor let the garbage collector reset) the parent's connections.
    _inherited.extend(_held.values())
    _held.clear()


os.register_at_fork(after_in_child=_forget_held_after_fork)


def _close_quietly(conn: Connection) -> None:
    try:
        conn.close()
    except Exception:
        conn.invalidate()


def release_held() -> None:
    """Return this process's held autocommit connections to their pools (``reset_engine``, tests)."""
    while _held:
        _close_quietly(_held.popitem()[1][1])


def _take_held(engine: Engine, durable: bool) -> Connection | None:
    slot = _held.pop(durable, None)
    if slot is None:
        return None
    held_engine, conn, used = slot
    if held_engine is not engine or conn.invalidated or conn.closed:
        _close_quietly(conn)
        return None
    if _suspect(used):  # as the pool does at checkout: a restart is caught here
        try:
            dbapi_conn = conn.connection.dbapi_connection
            assert dbapi_conn is not None
            engine.dialect.do_ping(dbapi_conn)
        except Exception:
            conn.invalidate()
            _close_quietly(conn)
            return None
    return conn


@contextmanager
def single_statement(*, durable: bool = True) -> Iterator[Connection]:
    """A connection in autocommit, for one statement that is a whole unit of work (PostgreSQL): no BEGIN and
    COMMIT round trips around it. ``durable=False`` as for ``transaction``.

    On the main thread the connection stays checked out for the next call (see ``_held``); one that
    raised is closed instead, and one idle for ``PING_AFTER_IDLE_S`` is pinged before use."""
    engine = (session_factory() if durable else _relaxed_factory()).kw["bind"]
    if threading.current_thread() is not threading.main_thread():
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn
        return
    conn = _take_held(engine, durable) or engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        yield conn
    except BaseException:
        _close_quietly(conn)
        raise
    if durable in _held:  # a nested call held one meanwhile: keep one, return this one
        _close_quietly(conn)
    else:
        _held[durable] = (engine, conn, time.monotonic())


@contextmanager
def read_statement() -> Iterator[Connection]:
    """A pooled connection for one read (any thread) that needs no transaction of its own, in autocommit (no
    BEGIN and COMMIT round trips)."""
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        yield conn


def require_durable(session: Session) -> None:
    """This transaction's commit waits for the WAL flush after all (it recorded an outcome)."""
    session.execute(text("SET LOCAL synchronous_commit TO on"))


# Where the database failed, as the API (503) and the worker (an execution abandoned, not failed) judge it.
def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached now (a restart, an outage, a full pool), not
    that the request or the code is wrong: connection refused or lost, a connection SQLAlchemy found dead
    (``connection_invalidated``), PostgreSQL shutting down or starting up (SQLSTATE class 08, 57P01-57P03),
    too many connections (53300), or no pooled connection free in time."""
    if isinstance(exc, PoolTimeout | DisconnectionError):
        return True
    cause: BaseException | None = exc
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        cause = exc.orig
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03", "53300")


def failure_line(exc: BaseException) -> str:
    """``exc`` in one line for a log or a refusal: its type and the driver's first line (no SQL, no
    parameters, no traceback)."""
    why = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {why[0]}" if why else type(exc).__name__
