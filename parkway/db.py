"""Engines and sessions: one engine per process (never shared across fork), SQLite tuned for many writers."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from parkway.settings import get_settings

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "engine": None, "factory": None}


def normalize_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL whatever driver the URL names (or none)."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` so writers queue."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Take the write lock at BEGIN: check-then-write transactions never race on SQLite.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def get_engine() -> Engine:
    """This process's engine, made anew after a fork (the parent's pooled connections are left alone)."""
    with _lock:
        if _state["pid"] != os.getpid() or _state["engine"] is None:
            old = _state["engine"]
            if old is not None:
                old.dispose(close=False)
            engine = make_engine(get_settings().effective_database_url)
            _state.update(pid=os.getpid(), engine=engine, factory=sessionmaker(engine, expire_on_commit=False))
        engine_: Engine = _state["engine"]
        return engine_


def reset_engine() -> None:
    """Drop this process's engine (after fork, or when the settings changed)."""
    with _lock:
        old = _state["engine"]
        if old is not None:
            if _state["pid"] == os.getpid():
                old.dispose()
            else:
                old.dispose(close=False)
        _state.update(pid=None, engine=None, factory=None)


def session_factory() -> sessionmaker[Session]:
    get_engine()
    factory: sessionmaker[Session] = _state["factory"]
    return factory


@contextmanager
def transaction() -> Iterator[Session]:
    """One unit of work: commits when the block ends, rolls back on any exception."""
    with session_factory()() as session, session.begin():
        yield session


def is_postgres(session_or_engine: Session | Engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"
