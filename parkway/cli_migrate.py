"""``parkway migrate``: bring the configured (or embedded) database to the current schema; and how the CLI
names a database to a person."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from parkway import embedded

if TYPE_CHECKING:
    from parkway.settings import Settings


def cmd_migrate(_: argparse.Namespace) -> int:
    from parkway.db import get_engine
    from parkway.migrate import current_revision, head_revision, upgrade
    from parkway.placeholders import refuse_placeholders
    from parkway.settings import get_settings

    settings = get_settings()
    embedded.start_for_process(settings.embedded_dir)  # and stopped when `migrate` exits, if it started it
    engine = get_engine()
    refuse_placeholders(engine)  # every value left as .env.example's placeholder, named at once
    settings.resolved_secret_key()  # then a key the API, worker and beat would refuse: the deploy stops here
    before = current_revision(engine)  # unreachable: one line from ``main``
    # At head already (every start of `parkway up` but the first): nothing to run, so alembic is not loaded
    after = before if before == head_revision() else upgrade(engine)
    print(f"parkway migrate: {database_shown(settings)}: {before or 'empty'} -> {after}")
    return 0


def database_shown(settings: Settings) -> str:
    """The database as a person may be shown it: the embedded one's directory, or the URL without its password."""
    if settings.embedded_dir:
        return embedded.describe(settings.embedded_dir)
    parts = urlsplit(settings.database_url)
    if parts.password is None:
        return settings.database_url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}"))
