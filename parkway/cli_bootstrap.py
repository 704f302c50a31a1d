"""What ``parkway up`` makes on its first start: an admin, an agent and a human with their tokens (printed
once) on an empty embedded database, and Flower's login (kept in ``PARKWAY_HOME``); and the URLs it prints."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from parkway.errors import ConfigError
from parkway.tokens import hash_token, new_token

if TYPE_CHECKING:
    from parkway.settings import Settings

EXAMPLE_TARGET = "example"  # the target of the shipped examples/ workflows
# (kind, name, what it is for); the admin holds every target, the others a grant on the example target.
BOOTSTRAP = (
    ("admin", "admin", "admin: makes principals, grants and tokens; sees every target"),
    ("agent", "agent", f"agent: starts runs on target {EXAMPLE_TARGET}"),
    ("human", "human", f"human: answers on the Decisions page, target {EXAMPLE_TARGET}"),
)
MORE = (
    "more principals: parkway token create --kind agent|human|admin --name NAME, "
    "then parkway grant create --principal NAME --target TARGET"
)
FLOWER_USER = "parkway"
FLOWER_FILE = "flower.auth"


class _Raced(Exception):
    """Another ``parkway up`` made the principals first: this transaction rolls back."""


def welcome(settings: Settings) -> list[str]:
    """The lines about principals ``parkway up`` prints after migrating: on the first start of an empty
    embedded database, the tokens it just made (the only time they are shown); afterwards, where they
    came from. A configured database is never bootstrapped: ``parkway token create`` is the way there."""
    if not settings.embedded_database:
        return ["principals: the database is configured (PARKWAY_DATABASE_URL), nothing is made here; "
                "the first admin: parkway token create --kind admin --name NAME"]  # fmt: skip
    made = _bootstrap()
    if made is not None:
        lines = ["first start of an empty database: made these principals; their tokens are printed only now"]
        lines += [f"  {name:<6} {token}  ({what})" for name, what, token in made]
        return [*lines, MORE]
    return [_where_tokens_came_from(), MORE]


def _bootstrap() -> list[tuple[str, str, str]] | None:
    """(name, what, token) of each principal made, or ``None`` when the database already had principals."""
    from models import principals, store
    from parkway.db import transaction

    made: list[tuple[str, str, str]] = []
    try:
        with transaction() as session:
            listed, _ = principals.list_principals(session, cursor=None, limit=1)
            if listed:
                return None
            for kind, name, what in BOOTSTRAP:
                token = new_token()
                principal = store.create_principal(session, kind=kind, name=name, token_hash=hash_token(token))
                if principal is None:  # the name is taken: a concurrent start made them
                    raise _Raced
                if kind != "admin":
                    store.create_grant(session, principal_id=principal.id, target=EXAMPLE_TARGET)
                made.append((name, what, token))
    except _Raced:
        return None
    return made


def _where_tokens_came_from() -> str:
    from models import store
    from parkway.db import transaction

    with transaction() as session:
        admin = store.principal_by_name(session, BOOTSTRAP[0][1])
        when = None if admin is None or admin.kind != "admin" else admin.created_at
    if when is None:
        return "tokens: this database's principals were made with parkway token create (none by parkway up)"
    names = ", ".join(name for _, name, _ in BOOTSTRAP)
    return (
        f"tokens: those of {names} were printed once, by the first start ({when:%Y-%m-%d %H:%M:%S} UTC), "
        "and are not shown again; parkway token rotate NAME prints a new one"
    )


def urls(api: str, flower: str | None, flower_where: str = "") -> list[str]:
    """Where to go once the stack is up."""
    lines = [
        f"API          {api}",
        f"API docs     {api}/docs",
        f"Decisions    {api}/decisions",
        f"run history  {api}/runs",
    ]
    if flower is not None:
        lines.append(f"Flower       {flower}  ({flower_where})")
    return lines


def flower_login(home: Path) -> tuple[str, str, str]:
    """Flower's ``user:password``, what its ready line says of it and where it is kept: ``FLOWER_BASIC_AUTH``
    if set, else made once into a 0600 file in ``home`` and reused (the password is printed only by the
    start that made it)."""
    given = os.environ.get("FLOWER_BASIC_AUTH", "")
    if given:
        _require_logins(given)
        return given, "basic auth from FLOWER_BASIC_AUTH", "login from FLOWER_BASIC_AUTH"
    path = home / FLOWER_FILE
    made = not path.exists() and _create_once(path, f"{FLOWER_USER}:{secrets.token_urlsafe(18)}\n")
    try:
        login = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the Flower login file {path} cannot be read: {exc}") from exc
    user, _, password = login.partition(":")
    if not user or not password:
        raise ConfigError(f"the Flower login file {path} does not hold user:password; delete it to make a new one")
    where = f"login kept in {path}, 0600; FLOWER_BASIC_AUTH=user:password overrides it"
    if made:
        return login, f"user:password {login}", where
    return login, f"user {user}, password in {path}", where


def require_usable_flower_login() -> None:
    """Refuse a ``FLOWER_BASIC_AUTH`` nobody could log in with: checked first, before ``parkway up`` imports
    the workflows or touches its home."""
    given = os.environ.get("FLOWER_BASIC_AUTH", "")
    if given:
        _require_logins(given)


def _require_logins(value: str) -> None:
    """Refuse a ``FLOWER_BASIC_AUTH`` nobody could log in with: Flower compares each comma-separated entry
    with the browser's ``user:password`` as it is."""
    for entry in value.split(","):
        user, _, password = entry.partition(":")
        if not user or not password:
            raise ConfigError(
                "FLOWER_BASIC_AUTH must be user:password (neither empty), or a comma-separated list of them"
            )


def _create_once(path: Path, content: str) -> bool:
    """Write ``content`` to a new 0600 file at ``path``, whole or not at all; false when one was there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)  # never replaces a file another start made meanwhile
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
