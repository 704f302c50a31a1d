"""Placeholder values from ``.env.example`` that must never reach a real deployment.

``parkway migrate`` calls ``refuse_placeholders`` before it touches the database: a stack started from an
env file whose PostgreSQL password or secret key was not replaced stops at its first step, with a line that
says which value to set.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from parkway.errors import ConfigError
from parkway.settings import Settings, get_settings

# What .env.example writes where a value must be chosen; compared without case.
PLACEHOLDER = "change-me"


def is_placeholder(value: str | None) -> bool:
    """Whether ``value`` is (or still contains) the env file's placeholder."""
    return value is not None and PLACEHOLDER in value.lower()


def placeholder_problems(database_url: URL, settings: Settings) -> list[str]:
    """Which configured values are still placeholders (names only, never the values)."""
    problems = []
    if is_placeholder(database_url.password):
        problems.append("the PostgreSQL password (POSTGRES_PASSWORD)")
    if is_placeholder(settings.secret_key):
        problems.append("the secret key (PARKWAY_SECRET_KEY)")
    return problems


def refuse_placeholders(engine: Engine) -> None:
    """Raise ``ConfigError`` if the engine's password or the secret key is still the placeholder."""
    problems = placeholder_problems(engine.url, get_settings())
    if problems:
        raise ConfigError(
            f"{' and '.join(problems)} still {'holds' if len(problems) == 1 else 'hold'} the placeholder "
            f"{PLACEHOLDER!r} from .env.example; set a random value in .env (e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
        )
