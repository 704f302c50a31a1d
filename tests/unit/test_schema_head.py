"""The revision the code needs (``parkway.migrate.HEAD``) is the head of the migrations it ships."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from parkway.migrate import HEAD, alembic_config


def test_head__is_the_head_of_migrations_versions() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [HEAD], f"migrations/versions ends at {heads}: set parkway.migrate.HEAD to the new revision"
