"""Schema revisions: upgrade to head, and the guard of invariant 10 (refuse a schema we do not match)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parkway.errors import SchemaMismatch

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Engine

# A DB-API ``execute`` of one statement: SQLAlchemy's ``Connection.exec_driver_sql``, or psycopg's
# ``Connection.execute`` (the CLI's quick commands read the revision without importing SQLAlchemy).
Execute = Callable[[str], Any]

ROOT = Path(__file__).resolve().parent.parent

# The revision this code needs: the head of migrations/versions (tests/unit/test_schema_head.py keeps them
# equal). The start check of every process (the API, a worker, beat, each CLI command) and each /readyz
# compare the database's revision with it; alembic is loaded only to migrate, or to explain a mismatch.
HEAD = "0031"


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    if url:
        config.cmd_opts = None
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine) -> str:
    """Bring the schema to head; returns the revision now current."""
    from alembic import command

    from parkway.placeholders import refuse_placeholders

    refuse_placeholders(engine)  # an env file's placeholders stop a deployment at its first step
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return head_revision()


def head_revision() -> str:
    return HEAD


def current_revision(engine: Engine) -> str | None:
    """The database's revision (``alembic_version``), or ``None`` when it has no Parkway schema."""
    with engine.connect() as connection:
        return revision_read(connection.exec_driver_sql)


def revision_read(execute: Execute) -> str | None:
    """``current_revision`` through ``execute``."""
    if execute("SELECT to_regclass('alembic_version')").fetchone()[0] is None:
        return None
    revisions = [row[0] for row in execute("SELECT version_num FROM alembic_version").fetchall()]
    return ",".join(sorted(revisions)) or None


def schema_problem(engine: Engine) -> str | None:
    """Why this code cannot run against the database's schema, or ``None`` when it matches."""
    return revision_problem(current_revision(engine))


def revision_problem(current: str | None) -> str | None:
    """Why this code cannot run against a schema at revision ``current``, or ``None`` when it matches."""
    head = head_revision()
    if current == head:
        return None
    if current is None:
        return "the database has no Parkway schema; run `parkway migrate`"
    from alembic.script import ScriptDirectory

    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current not in known:
        return (
            f"the database schema is at revision {current}, newer than this code knows (head {head}); "
            "deploy the newer code"
        )
    return f"the database schema is at revision {current}, older than this code needs ({head}); run `parkway migrate`"


def require_current_schema(engine: Engine) -> None:
    """Raise ``SchemaMismatch`` unless the schema is exactly the revision this code needs."""
    require_revision(current_revision(engine))


def require_revision(current: str | None) -> None:
    """Raise ``SchemaMismatch`` unless ``current`` is the revision this code needs."""
    problem = revision_problem(current)
    if problem is not None:
        raise SchemaMismatch(problem)
