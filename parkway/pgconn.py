"""Plain psycopg connections, for the CLI's quick commands (``parkway token create``, ``parkway grant create``):
the database, session options and URL handling of ``parkway.db``'s engine, without importing SQLAlchemy
(whose import alone takes longer than such a command should)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from parkway.settings import get_settings

if TYPE_CHECKING:
    import psycopg


def normalize_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL whatever driver the URL names (or none): ``postgres[ql][+driver]://``,
    in any case, becomes ``postgresql+psycopg://``, the rest of the URL kept as it is."""
    scheme, found, rest = url.partition("://")
    if found and scheme.split("+", 1)[0].lower() in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + rest
    return url


def connect_args(*, durable: bool = True) -> dict[str, str]:
    """The session settings of every connection: ``durable=False``, ``synchronous_commit=off`` (for
    ``transaction(durable=False)``); and always an ``idle_in_transaction_session_timeout`` of two claim
    leases (no transaction of Parkway's stays open across a body). A process that hangs inside a
    transaction (stopped, paused, deadlocked) then holds its row locks for no more than about what it
    could hold a claim: PostgreSQL ends the session, the rows are released, the sweep re-drives what it
    left. (Two leases: a live process on a busy host is not cut off mid-work.)"""
    idle_ms = round(2 * get_settings().claim_lease_s * 1000)
    options = f"-c idle_in_transaction_session_timeout={idle_ms}"
    return {"options": options if durable else f"{options} -c synchronous_commit=off"}


def libpq_url(url: str) -> str:
    """The URL as libpq reads it: ``postgresql://…``, without SQLAlchemy's driver name."""
    return "postgresql://" + normalize_url(url).partition("://")[2]


@contextmanager
def transaction() -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A durable transaction on a connection of its own: committed when the block ends, rolled back on any
    exception, and the connection closed either way."""
    import psycopg

    url = libpq_url(get_settings().effective_database_url)
    with psycopg.connect(url, options=connect_args()["options"]) as conn:
        yield conn


def listening(channel: str) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection of its own in autocommit, listening on ``channel`` (read with ``notifies``)."""
    import psycopg

    url = libpq_url(get_settings().effective_database_url)
    conn = psycopg.connect(url, options=connect_args()["options"], autocommit=True)
    conn.execute(f"LISTEN {channel}")
    return conn
