"""The ``parkway`` command: migrate, token create|revoke|rotate, grant create|list|revoke, run start, sweep
--once, workers, check, decisions export|verify|key, up, logs, demo."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from parkway.children import child_environment
from parkway.cli_migrate import cmd_migrate, database_shown
from parkway.errors import ConfigError, ParkwayError
from parkway.tokens import hash_token, new_token

if TYPE_CHECKING:
    pass


def _unreachable(exc: Exception) -> str | None:
    """``cannot reach the database at …: why`` when ``exc`` is a failed connection (psycopg's, or SQLAlchemy's
    around it), else ``None``."""
    psycopg = sys.modules.get("psycopg")  # not imported: nothing connected
    cause = getattr(exc, "orig", None) or exc
    if psycopg is None or not isinstance(cause, psycopg.OperationalError):
        return None
    from parkway.settings import get_settings

    # The driver's first line says why: refused, unknown host, bad password, no such database.
    why = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"cannot reach the database at {database_shown(get_settings())}: {why}"


def cmd_token_create(args: argparse.Namespace) -> int:
    """Make a principal; its token alone on stdout. On plain psycopg (``parkway.pgconn``): a quick command."""
    from models import principal_sql
    from parkway import pgconn
    from parkway.migrate import require_revision, revision_read

    token = new_token()
    with pgconn.transaction() as conn:
        require_revision(revision_read(conn.execute))
        made = principal_sql.create_principal(conn.execute, kind=args.kind, name=args.name,
                                              token_hash=hash_token(token))  # fmt: skip
    if made is None:
        print(f"parkway token create: the name {args.name!r} is taken", file=sys.stderr)
        return 1
    print(token)
    if args.kind == "worker":  # it leases only runs on targets it holds a live grant on
        grant = f"parkway grant create --principal {args.name} --target T"
        print(f"parkway token create: worker {args.name} leases the runs of no target until granted one: {grant} "
              "(docs/worker-protocol.md)", file=sys.stderr)  # fmt: skip
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    """Disable the principal: its token gets 401 from now on, its grants are revoked, its page sessions end."""
    from models import principals
    from models.store.principals import principal_by_name
    from parkway.db import get_engine, transaction
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    with transaction() as session:
        found = principal_by_name(session, args.name)
        if found is None:
            print(f"parkway token revoke: no principal is named {args.name!r}", file=sys.stderr)
            return 1
        disabled = principals.disable(session, found.id)
    said = "disabled" if disabled is not None else "was already disabled"
    print(f"parkway token revoke: {found.kind} {args.name} {said}; its token no longer works", file=sys.stderr)
    return 0


def cmd_token_rotate(args: argparse.Namespace) -> int:
    """Give the principal a new token, printed once on stdout alone; the old one stops working."""
    from models import principals
    from models.store.principals import principal_by_name
    from parkway.db import get_engine, transaction
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    token = new_token()
    with transaction() as session:
        found = principal_by_name(session, args.name)
        rotated = principals.rotate_token(session, found.id, hash_token(token)) if found is not None else None
    if rotated is None:
        why = "is disabled" if found is not None else "does not exist"
        print(f"parkway token rotate: the principal {args.name!r} {why}", file=sys.stderr)
        return 1
    print(token)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from beat.sweep import run_sweep
    from parkway.db import get_engine
    from parkway.migrate import require_current_schema
    from parkway.settings import get_settings

    get_settings().require_imports()  # a configuration naming a missing module is refused here too
    require_current_schema(get_engine())
    report = run_sweep(batch=args.batch)
    print(json.dumps(report.as_dict()) if args.json else report.line())
    return 0


# --------------------------------------------------------------------------- parkway demo


def cmd_demo(args: argparse.Namespace) -> int:
    from parkway.demo import run_demo

    return run_demo(keep=args.keep, verbose=args.verbose)


# The commands that may make a home (the first ``parkway up`` or ``migrate``; the demo's is its own). Every other
# command uses the stack's: found from here up (``settings.nearest_home``), never a new one started silently.
MAKES_HOME = {"up", "migrate", "demo"}
NEEDS_NO_HOME = {"check"}  # reads the workflow modules alone
NEEDS_NO_DATABASE = {"logs"}  # reads the home's log files


def _in_home(command: str) -> None:
    """Refuse a command run where no home is (the embedded defaults); start the embedded PostgreSQL for a
    command that needs it and is not running, and stop it when this process exits."""
    from parkway import embedded
    from parkway.settings import get_settings, is_home

    settings = get_settings()
    if not settings.embedded_database or command in MAKES_HOME | NEEDS_NO_HOME:
        return
    home = Path(settings.home).resolve()
    if not is_home(home):
        where = (f"PARKWAY_HOME={settings.home} holds none" if "PARKWAY_HOME" in os.environ
                 else f"none in {Path.cwd()} or a folder above it (a var/ that `parkway up` made)")  # fmt: skip
        raise ConfigError(f"no Parkway home: {where}; run it inside the project, or set PARKWAY_HOME "
                          "or PARKWAY_DATABASE_URL")  # fmt: skip
    if command not in NEEDS_NO_DATABASE:
        embedded.start_for_process(settings.embedded_dir)


AddParser = Callable[..., argparse.ArgumentParser]  # the ``add_parser`` of the commands' subparsers


def _add_token(add_parser: AddParser) -> None:
    token = add_parser("token", help="manage principals' tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="create a principal and print its token once")
    create.add_argument("--kind", required=True, choices=["agent", "human", "admin", "worker", "auditor"])
    create.add_argument("--name", required=True)
    create.set_defaults(fn=cmd_token_create)
    revoke = token_sub.add_parser("revoke", help="disable a principal: its token, grants and page sessions end")
    revoke.add_argument("name", metavar="NAME")
    revoke.set_defaults(fn=cmd_token_revoke)
    rotate = token_sub.add_parser("rotate", help="give a principal a new token and print it once; the old one ends")
    rotate.add_argument("name", metavar="NAME")
    rotate.set_defaults(fn=cmd_token_rotate)


def _add_sweep(add_parser: AddParser) -> None:
    sweep = add_parser("sweep", help="run the recovery sweep")
    sweep.add_argument("--once", action="store_true", required=True, help="one pass, then exit")
    sweep.add_argument("--batch", type=int, default=None)
    sweep.add_argument("--json", action="store_true", help="print the report as one JSON object, not the line")
    sweep.set_defaults(fn=cmd_sweep)


def _add_demo(add_parser: AddParser) -> None:
    demo = add_parser(
        "demo",
        help="the restart story, end to end, with real processes",
        description="Start API, worker and beat on the embedded defaults in a fresh temporary PARKWAY_HOME, "
        "park a run on a permission and a question, SIGKILL the worker and the API, restart them, answer, "
        "crash the resuming worker at resume.before_commit, restart it, and check the continuation "
        "committed exactly once. Exits 0 only if every check held.",
    )
    demo.add_argument("--keep", action="store_true", help="keep the temporary PARKWAY_HOME (logs, database)")
    demo.add_argument("--verbose", action="store_true", help="relay the children's logs to stderr")
    demo.set_defaults(fn=cmd_demo)


def _add_migrate(add_parser: AddParser) -> None:
    add_parser("migrate", help="bring the database schema to the current revision").set_defaults(fn=cmd_migrate)


def _module(name: str) -> Callable[[AddParser], None]:
    """The ``add_commands`` of ``parkway.<name>``, imported only when called."""
    return lambda add_parser: importlib.import_module(f"parkway.{name}").add_commands(add_parser)


# The commands, in the order --help lists them, each group with what adds it to the parser. A run of one
# command builds (and imports) its own group alone; --help and a mistyped command build them all.
COMMANDS: list[tuple[tuple[str, ...], Callable[[AddParser], None]]] = [
    (("migrate",), _add_migrate),
    (("token",), _add_token),
    (("grant", "run"), _module("cli_grants")),
    (("sweep",), _add_sweep),
    (("workers",), _module("cli_workers")),
    (("check",), _module("cli_check")),
    (("webhook",), _module("cli_webhooks")),
    (("handler",), _module("cli_handlers")),
    (("decisions",), _module("cli_decisions")),
    (("up", "logs"), _module("cli_up")),
    (("demo",), _add_demo),
]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``parkway`` parser: every command's, or only ``command``'s group when it names one."""
    parser = argparse.ArgumentParser(prog="parkway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    named = any(command in names for names, _ in COMMANDS)
    for names, add in COMMANDS:
        if not named or command in names:
            add(sub.add_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Children import `tasks`, `models` … and the workflow modules from this checkout too.
    os.environ["PYTHONPATH"] = child_environment()["PYTHONPATH"]
    # And from the current directory, which `python -m celery` and `python -m uvicorn` put on their path: so
    # does this process (a console script's path starts at its bin/), which imports PARKWAY_IMPORTS too.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(given[0] if given else None).parse_args(given)
    from parkway.logs import setup_logging

    setup_logging()
    try:
        _in_home(args.command)
        code: int = args.fn(args)
    except ParkwayError as exc:
        print(f"parkway {args.command}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        problem = _unreachable(exc)
        if problem is None:
            raise
        print(f"parkway {args.command}: {problem}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
