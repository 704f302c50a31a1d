"""Real services for the suite: PostgreSQL, and Redis or the filesystem broker.

PostgreSQL: ``PARKWAY_TEST_PG_URL`` (an admin URL), or ``embedded`` for an embedded PostgreSQL (the wheel
``parkway up`` uses) of this session's own, in its temporary home, stopped when the session ends. Unset, it is
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres`` when that answers, else the embedded one: the suite
passes on a machine with no PostgreSQL. With ``PARKWAY_REQUIRE_SERVICES=1`` (CI) there is no fallback: a
configured or default server that does not answer fails the run (CI tests what it set up, never something
else), and a missing Redis fails it too instead of skipping.

Broker: ``PARKWAY_TEST_BROKER=redis`` (default: ``PARKWAY_TEST_REDIS_URL``, or a Redis database index held by
this session alone) or ``filesystem`` (``filesystem://``: the embedded default where Valkey has no wheel).
``make test`` runs the whole suite on Redis; ``-m broker`` selects the tests where broker behaviour matters
(the modules of ``BROKER_MODULES``, and single tests), to run them on the filesystem broker by hand.

A migrated template database is made once per session (``alembic upgrade head`` + ``alembic check``) and
cloned per module (``stack``) or per test (``fresh_db``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from functools import lru_cache
from pathlib import Path

# The test process's settings must be in place before anything imports the Celery app.
BROKER = os.environ.get("PARKWAY_TEST_BROKER", "redis")
if BROKER not in ("redis", "filesystem"):
    raise RuntimeError(f"PARKWAY_TEST_BROKER must be redis or filesystem, not {BROKER!r}")
SESSION_HOME = Path(tempfile.mkdtemp(prefix=f"parkway-test-{BROKER}-"))
# The embedded PostgreSQL data directory the CLI tests' homes start from a copy of (tests/cli/conftest.py):
# named by the first process of the run (its xdist workers inherit the name), removed by that process.
CLUSTER_OWNER = "PARKWAY_TEST_CLUSTER_DIR" not in os.environ
if CLUSTER_OWNER:
    os.environ["PARKWAY_TEST_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="parkway-cluster-")
CLUSTER_DIR = Path(os.environ["PARKWAY_TEST_CLUSTER_DIR"])
# Every process the suite starts (workers, beat, API servers, ``parkway`` commands) imports the project's
# modules: compiled to bytecode once here, by the run's first process, they are not compiled again in each of
# them where ``PYTHONDONTWRITEBYTECODE`` is set (as in this project's image), which leaves nothing cached.
PROJECT_PACKAGES = ("api", "beat", "examples", "models", "parkway", "tasks", "tests")
if CLUSTER_OWNER:
    import compileall

    for _package in PROJECT_PACKAGES:
        compileall.compile_dir(Path(__file__).resolve().parent.parent / _package, quiet=1)
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PG_URL_SETTING = os.environ.get("PARKWAY_TEST_PG_URL", "")
REQUIRE_SERVICES = os.environ.get("PARKWAY_REQUIRE_SERVICES") == "1"

# The modules where the broker's behaviour matters: delivery, redelivery, workers killed, the broker down or
# flushed, what travels in messages, Flower, broker metrics. In a module where it matters to some tests only
# (tests/acceptance/test_recovery.py, test_terminal_truth.py) those carry ``@pytest.mark.broker`` themselves.
# The rest runs once, on Redis.
BROKER_MODULES = {
    "tests/acceptance/test_broker_down.py",
    "tests/acceptance/test_crash_points.py",
    "tests/acceptance/test_resume.py",
    "tests/acceptance/test_task_repr.py",
    "tests/api/test_metrics.py",
    "tests/api/test_sensitive.py",
    "tests/deploy/test_flower.py",
}

# The modules that run longest, longest first. ``make test`` hands whole modules to its xdist workers in
# collection order (``--no-loadscope-reorder``): these go out first, so no long one starts last while the
# other workers sit idle; the many short modules fill in behind them.
LONG_MODULES = (
    "tests/cli/test_up.py",
    "tests/cli/test_walkthrough.py",
    "tests/cli/test_refusals.py",
    "tests/api/test_fuzz.py",
    "tests/acceptance/test_typescript_client.py",
    "tests/acceptance/test_recovery.py",
    "tests/cli/test_supervise.py",
    "tests/acceptance/test_tracing.py",
    "tests/acceptance/test_terminal_truth.py",
    "tests/acceptance/test_executor.py",
    "tests/acceptance/test_webhook_crashes.py",
    "tests/acceptance/test_teams.py",
    "tests/acceptance/test_crash_points.py",
    "tests/integration/test_sweep.py",
    "tests/integration/test_query_plans.py",
    "tests/acceptance/test_worker_protocol.py",
    "tests/cli/test_embedded.py",
    "tests/acceptance/test_tools.py",
    "tests/acceptance/test_clock.py",
    "tests/api/test_http_e2e.py",
    "tests/cli/test_console.py",
    "tests/pages/test_decisions_browser.py",
    "tests/api/test_rabbitmq.py",
    "tests/acceptance/test_served.py",
    "tests/acceptance/test_push.py",
    "tests/api/test_authz_table.py",
    "tests/cli/test_demo.py",
    "tests/acceptance/test_rolling_deploy.py",
    "tests/acceptance/test_worker_soak.py",
    "tests/integration/test_migrations.py",
    "tests/cli/test_grants.py",
    "tests/cli/test_webhooks.py",
    "tests/cli/test_token.py",
    "tests/api/test_sensitive.py",
    "tests/acceptance/test_served_remote.py",
    "tests/acceptance/test_system_faults.py",
    "tests/api/test_offline_docs.py",
    "tests/api/test_db_outage.py",
    "tests/api/test_event_soak.py",
    "tests/acceptance/test_go_example.py",
)


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
REDIS_URL = ""
if BROKER == "redis":
    REDIS_URL = os.environ.get("PARKWAY_TEST_REDIS_URL") or f"redis://127.0.0.1:6379/{_claim_redis_db()}"

BASE_ENV = {
    "PARKWAY_HOME": str(SESSION_HOME),
    # Named even for the filesystem broker: an unset URL is the embedded Valkey where that is installed.
    "PARKWAY_BROKER_URL": REDIS_URL or "filesystem://",
    "PARKWAY_SECRET_KEY": "test-secret-key-" + "x" * 40,
    "PARKWAY_IMPORTS": "tests.workflows",
    "PARKWAY_CLAIM_LEASE_S": "2",
    "PARKWAY_REENQUEUE_AFTER_S": "1",
    "PARKWAY_SWEEP_INTERVAL_S": "1",
    "PARKWAY_MAX_ATTEMPTS": "5",
    # A version no live worker runs fails closed this long after it was last advertised (or its wait began),
    # and a worker is live for 3 heartbeats after each: short enough for tests to see both.
    "PARKWAY_VERSION_GRACE_S": "5",
    "PARKWAY_WORKER_HEARTBEAT_S": "1",
    "PARKWAY_WORKSPACE_DIR": str(SESSION_HOME / "workspaces"),
    # Receivers in tests listen on 127.0.0.1; retries come in tenths of seconds.
    "PARKWAY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "PARKWAY_WEBHOOK_RETRY_S": "0.2,0.5,1",
    "PARKWAY_WEBHOOK_TIMEOUT_S": "2",
}
for _name, _value in BASE_ENV.items():
    os.environ[_name] = _value
os.environ.pop("PARKWAY_CRASH_AT", None)
os.environ.pop("PARKWAY_DATABASE_URL", None)

from collections import Counter  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import pytest  # noqa: E402
from sqlalchemy import create_engine, make_url, text  # noqa: E402

import tests.workflows  # noqa: E402,F401  (registers the test workflows in this process too)
from parkway.db import reset_engine  # noqa: E402
from parkway.settings import reset_settings  # noqa: E402
from tasks.projection import drain_projections  # noqa: E402
from tests.support import ROOT, Stack, unavailable  # noqa: E402


@lru_cache(maxsize=1)
def pg_admin_url() -> str:
    """The admin URL of the PostgreSQL this session runs on (an embedded one is started on first use)."""
    if PG_URL_SETTING and PG_URL_SETTING != "embedded":
        return PG_URL_SETTING
    if not PG_URL_SETTING and (REQUIRE_SERVICES or unavailable(DEFAULT_PG_URL) is None):
        return DEFAULT_PG_URL
    from parkway import embedded

    return embedded.url(embedded.data_dir(SESSION_HOME), database="postgres")


def _service_problem() -> str | None:
    try:
        url = pg_admin_url()
    except Exception as exc:  # the embedded one did not start: the reason is in one line
        return f"embedded PostgreSQL: {exc}"
    return unavailable(url, REDIS_URL or None)


def pytest_report_header() -> str:
    where = PG_URL_SETTING or "127.0.0.1:5432 if it answers, else embedded"
    return f"parkway: PostgreSQL {where}; broker {BROKER}" + (" (services required)" if REQUIRE_SERVICES else "")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(ROOT).as_posix() in BROKER_MODULES:
            item.add_marker(pytest.mark.broker)
    rank = {module: n for n, module in enumerate(LONG_MODULES)}
    gone = [module for module in LONG_MODULES if not (ROOT / module).is_file()]
    assert not gone, f"LONG_MODULES names modules that do not exist: {gone}"
    # A stable sort: each module's tests keep their order, the other modules theirs, after the long ones.
    items.sort(key=lambda item: rank.get(item.path.relative_to(ROOT).as_posix(), len(rank)))


_module_seconds: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each module's time, setup and teardown included (under xdist, as its workers report it)."""
    _module_seconds[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The longest modules, to keep ``LONG_MODULES`` in the order the suite needs."""
    if _module_seconds:
        terminalreporter.section("longest modules (setup, call and teardown)")
        for module, seconds in _module_seconds.most_common(30):
            mark = "" if module in LONG_MODULES else "   (not in LONG_MODULES)"
            terminalreporter.write_line(f"{seconds:8.1f}s  {module}{mark}")


def pytest_sessionfinish() -> None:
    from parkway import embedded

    embedded.stop(embedded.data_dir(SESSION_HOME))  # this session's own embedded PostgreSQL, if it started one
    shutil.rmtree(SESSION_HOME, ignore_errors=True)
    if CLUSTER_OWNER:  # after every xdist worker of the run has ended
        embedded.stop(embedded.data_dir(CLUSTER_DIR))
        shutil.rmtree(CLUSTER_DIR, ignore_errors=True)


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

    name = f"parkway_tpl_{uuid.uuid4().hex[:8]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    url = _on_database(name)
    _migrate(url, command, alembic_config)
    try:
        yield url
    finally:
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _on_database(name: str) -> str:
    return make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)


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
    engine = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def new_database() -> str:
    """The URL of a new, empty database on this session's PostgreSQL."""
    name = f"parkway_t_{uuid.uuid4().hex[:10]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    return _on_database(name)


def clone_database(template_url: str) -> str:
    """A new database cloned from the template (PostgreSQL ``TEMPLATE``)."""
    name = f"parkway_t_{uuid.uuid4().hex[:10]}"
    _pg_admin(f'CREATE DATABASE "{name}" TEMPLATE "{make_url(template_url).database}"')
    return _on_database(name)


def drop_database(url: str) -> None:
    _pg_admin(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


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
        broker=BROKER,
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
        drain_projections()  # a run this module ended is projected on a thread a moment later: not once dropped
        reset_engine()
        drop_database(url)


@contextmanager
def database_of_its_own(template_url: str) -> Iterator[str]:
    """A clone of ``template_url`` this process points at for the block, dropped after it (the database it
    pointed at before, if any, is current again)."""
    previous = os.environ.get("PARKWAY_DATABASE_URL")
    url = clone_database(template_url)
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


@pytest.fixture
def fresh_db(template_db: str) -> Iterator[str]:
    """A database of this test's own (no workers), for store-level tests that count whole tables."""
    with database_of_its_own(template_db) as url:
        yield url
