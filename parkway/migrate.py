"""Schema revisions: upgrade to head, and the guard of invariant 10 (refuse a schema we do not match)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from parkway.errors import SchemaMismatch
from parkway.placeholders import refuse_placeholders

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str | None = None) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    if url:
        config.cmd_opts = None
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine) -> str:
    """Bring the schema to head; returns the revision now current."""
    refuse_placeholders(engine)  # an env file's placeholders stop a deployment at its first step
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return head_revision()


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def schema_problem(engine: Engine) -> str | None:
    """Why this code cannot run against the database's schema, or ``None`` when it matches."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return None
    if current is None:
        return "the database has no Parkway schema; run `parkway migrate`"
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current not in known:
        return (
            f"the database schema is at revision {current}, newer than this code knows (head {head}); "
            "deploy the newer code"
        )
    return f"the database schema is at revision {current}, older than this code needs ({head}); run `parkway migrate`"


def require_current_schema(engine: Engine) -> None:
    """Raise ``SchemaMismatch`` unless the schema is exactly the revision this code needs."""
    problem = schema_problem(engine)
    if problem is not None:
        raise SchemaMismatch(problem)
