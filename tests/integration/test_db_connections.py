"""Pooled PostgreSQL connections: a connection that died while idle is replaced before it is used, and a
transaction never waits for a ping on a connection used moments ago (``parkway.db._ping_when_idle``).
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

import parkway.db
from parkway.db import get_engine, transaction
from tests.conftest import pg_admin_url
from tests.support import wait_for


def _kill_pooled_connections() -> int:
    """Terminate every server process of the test database but the admin connection's own."""
    from sqlalchemy import create_engine

    database = get_engine().url.database
    admin = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": database},
                ).all()
            )
    finally:
        admin.dispose()


def _backend_pid() -> int:
    with transaction() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_idle_connection_killed__replaced_before_use(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a pooled connection whose server process was terminated while it sat idle
    first = _backend_pid()
    assert _kill_pooled_connections() >= 1
    monkeypatch.setattr(parkway.db, "PING_AFTER_IDLE_S", 0.0)  # idle "long enough" without sleeping
    # When the next transaction checks a connection out, then it works on a new server process
    assert _backend_pid() != first
    # And a pinged connection is handed over outside any transaction (its isolation level can still be set)
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1


def test_recently_used_connection__not_pinged_and_a_restart_in_that_window_fails_once(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a connection used moments ago (no ping), whose server process is then terminated
    monkeypatch.setattr(parkway.db, "PING_AFTER_IDLE_S", 3600.0)
    first = _backend_pid()
    assert _kill_pooled_connections() >= 1
    # When the next transaction uses it, then it fails with the disconnect and nothing is half-done
    with pytest.raises(OperationalError):
        _backend_pid()
    # And the pool was replaced: the one after works on a new server process
    assert _backend_pid() != first


def _lock_free(key: int) -> bool:
    """Whether another session can take the transaction-level advisory lock ``key`` now (released at once)."""
    with transaction() as session:
        return bool(session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": key}).scalar_one())


def test_transaction_left_idle__ended_by_postgresql_after_a_lease_and_its_locks_released(fresh_db: str) -> None:
    # Given a transaction that holds a lock, then is left idle (as by a process stopped or hung in it)
    lease_s = parkway.db.get_settings().claim_lease_s
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"), transaction() as held:
        held.execute(text("SELECT pg_advisory_xact_lock(20)"))
        assert not _lock_free(20)
        # Then PostgreSQL ends it after the lease (no sleep here: the wait is on the lock), freeing the lock
        wait_for(lambda: _lock_free(20), timeout=lease_s * 10, what="the idle transaction's lock released")
        # And its owner finds its session gone: nothing it did in that transaction is committed
        held.execute(text("SELECT 1"))


def test_hot_path_statement__runs_on_the_connection_that_replaced_a_dead_one(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a hot-path statement run once on the main thread's held connection (its cursor kept there)
    from sqlalchemy import Integer, bindparam, select

    from models.store.driver import DriverStatement
    from parkway.db import single_statement

    statement = DriverStatement(lambda: select(bindparam("n", type_=Integer).label("n")))
    with single_statement() as conn:
        assert statement.first(conn, {"n": 1}).n == 1
    # ... whose server process is then terminated while it sits idle
    assert _kill_pooled_connections() >= 1
    monkeypatch.setattr(parkway.db, "PING_AFTER_IDLE_S", 0.0)  # idle "long enough" without sleeping
    # When it runs again, then it runs on the connection that replaced the dead one
    for n in (2, 3):
        with single_statement() as conn:
            assert statement.first(conn, {"n": n}).n == n
