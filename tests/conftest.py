"""Real services for the suite.

``PARKWAY_TEST_BACKEND=postgres`` (default) runs on PostgreSQL + Redis; ``sqlite`` on a SQLite file + the
embedded filesystem broker. A migrated template database is made once per session (``alembic upgrade
head`` + ``alembic check``) and cloned per module (``stack``) or per test (``fresh_db``). With
``PARKWAY_REQUIRE_SERVICES=1`` (CI) a missing service fails the run instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

# The test process's settings must be in place before anything imports the Celery app.
BACKEND = os.environ.get("PARKWAY_TEST_BACKEND", "postgres")
if BACKEND not in ("postgres", "sqlite"):
    raise RuntimeError(f"PARKWAY_TEST_BACKEND must be postgres or sqlite, not {BACKEND!r}")
SESSION_HOME = Path(tempfile.mkdtemp(prefix=f"parkway-test-{BACKEND}-"))
PG_ADMIN_URL = os.environ.get("PARKWAY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _claim_redis_db() -> int:
    """A Redis database index held by this pytest session alone (concurrent sessions never share a broker)."""
    import fcntl

    for index in range(1, 16):
        handle = open(f"/tmp/parkway-test-redis-db-{index}.lock", "w")  # noqa: SIM115  (held for the session)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held_locks.append(handle)
        return index
    raise RuntimeError("no free Redis database index for this test session (1-15 all held)")


_held_locks: list[object] = []
REDIS_URL = os.environ.get("PARKWAY_TEST_REDIS_URL") or f"redis://127.0.0.1:6379/{_claim_redis_db()}"
REQUIRE_SERVICES = os.environ.get("PARKWAY_REQUIRE_SERVICES") == "1"

BASE_ENV = {
    "PARKWAY_HOME": str(SESSION_HOME),
    "PARKWAY_BROKER_URL": REDIS_URL if BACKEND == "postgres" else "",
    "PARKWAY_SECRET_KEY": "test-secret-key-" + "x" * 40,
    "PARKWAY_IMPORTS": "tests.workflows",
    "PARKWAY_CLAIM_LEASE_S": "2",
    "PARKWAY_REENQUEUE_AFTER_S": "1",
    "PARKWAY_SWEEP_INTERVAL_S": "1",
    "PARKWAY_MAX_ATTEMPTS": "5",
    "PARKWAY_WORKSPACE_DIR": str(SESSION_HOME / "workspaces"),
}
for _name, _value in BASE_ENV.items():
    os.environ[_name] = _value
os.environ.pop("PARKWAY_CRASH_AT", None)
os.environ.pop("PARKWAY_DATABASE_URL", None)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

import tests.workflows  # noqa: E402,F401  (registers the test workflows in this process too)
from parkway.db import reset_engine  # noqa: E402
from parkway.settings import reset_settings  # noqa: E402
from tasks.projection import drain_projections  # noqa: E402
from tests.support import Stack, unavailable  # noqa: E402


def _service_problem() -> str | None:
    if BACKEND == "sqlite":
        return None
    return unavailable(PG_ADMIN_URL, REDIS_URL)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SQLite run deselects (never skips) what lives only in PostgreSQL: each test runs where it applies."""
    if BACKEND != "sqlite":
        return
    elsewhere = [item for item in items if item.get_closest_marker("postgres_only")]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if not item.get_closest_marker("postgres_only")]


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    """A database migrated to head (and checked for drift against the models), to clone from."""
    problem = _service_problem()
    if problem:
        if REQUIRE_SERVICES:
            pytest.fail(f"required service unavailable: {problem}")
        pytest.skip(f"service unavailable: {problem}")
    from alembic import command

    from parkway.migrate import alembic_config

    if BACKEND == "postgres":
        name = f"parkway_tpl_{uuid.uuid4().hex[:8]}"
        _pg_admin(f'CREATE DATABASE "{name}"')
        url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    else:
        url = f"sqlite:///{SESSION_HOME / 'template.sqlite3'}"
    _migrate(url, command, alembic_config)
    try:
        yield url
    finally:
        if BACKEND == "postgres":
            _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(SESSION_HOME, ignore_errors=True)


def _migrate(url: str, command: object, alembic_config: object) -> None:
    os.environ["PARKWAY_DATABASE_URL"] = url
    reset_settings()
    reset_engine()
    config = alembic_config()  # type: ignore[operator]
    command.upgrade(config, "head")  # type: ignore[attr-defined]
    command.check(config)  # type: ignore[attr-defined]
    # Nothing may stay pointed at the template: a connection to it makes every later clone fail.
    os.environ.pop("PARKWAY_DATABASE_URL")
    reset_settings()
    reset_engine()


def _pg_admin(sql: str) -> None:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def clone_database(template_url: str) -> str:
    """A new database cloned from the template (PostgreSQL ``TEMPLATE``, SQLite file copy)."""
    if BACKEND == "postgres":
        template = template_url.rsplit("/", 1)[1]
        name = f"parkway_t_{uuid.uuid4().hex[:10]}"
        _pg_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return template_url.rsplit("/", 1)[0] + f"/{name}"
    source = Path(template_url.split("///", 1)[1])
    target = SESSION_HOME / f"db_{uuid.uuid4().hex[:10]}.sqlite3"
    shutil.copyfile(source, target)
    return f"sqlite:///{target}"


def drop_database(url: str) -> None:
    if BACKEND == "postgres":
        _pg_admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    else:
        Path(url.split("///", 1)[1]).unlink(missing_ok=True)


def use_database(url: str) -> None:
    """Point this test process at a database."""
    os.environ["PARKWAY_DATABASE_URL"] = url
    reset_settings()
    reset_engine()


@pytest.fixture(scope="module")
def stack(template_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A database of this module's own, the broker emptied, and worker processes on demand."""
    url = clone_database(template_db)
    use_database(url)
    stack = Stack(
        backend=BACKEND,
        database_url=url,
        broker_url=BASE_ENV["PARKWAY_BROKER_URL"],
        home=SESSION_HOME,
        logs=tmp_path_factory.mktemp("logs"),
    )
    stack.flush_broker()
    stack.setup_actors()
    try:
        yield stack
    finally:
        stack.stop_all()
        reset_engine()
        drop_database(url)


@pytest.fixture
def fresh_db(template_db: str) -> Iterator[str]:
    """A database of this test's own (no workers), for store-level tests that count whole tables."""
    previous = os.environ.get("PARKWAY_DATABASE_URL")
    url = clone_database(template_db)
    use_database(url)
    try:
        yield url
    finally:
        # A run this test ended is projected on a thread a moment later: not on the next database.
        drain_projections()
        reset_engine()
        drop_database(url)
        if previous:
            use_database(previous)
