"""The ``parkway`` command: migrate, token create|revoke|rotate, grant create|list|revoke, run start, sweep
--once, workers, check, up, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from parkway import cli_bootstrap, cli_check, cli_grants, cli_webhooks, cli_workers, embedded
from parkway.children import QUEUES, Child, child_environment, http_problem, stop_children, stop_signals
from parkway.errors import ConfigError, ParkwayError
from parkway.locks import hold_for_life
from parkway.supervisor import RestartPolicy, Supervisor, exit_text
from parkway.tokens import hash_token, new_token

if TYPE_CHECKING:
    from parkway.settings import Settings


def cmd_migrate(_: argparse.Namespace) -> int:
    from parkway.db import get_engine
    from parkway.migrate import current_revision, upgrade
    from parkway.placeholders import refuse_placeholders
    from parkway.settings import get_settings

    settings = get_settings()
    embedded.start_for_process(settings.embedded_dir)  # and stopped when `migrate` exits, if it started it
    engine = get_engine()
    refuse_placeholders(engine)  # every value left as .env.example's placeholder, named at once
    settings.resolved_secret_key()  # then a key the API, worker and beat would refuse: the deploy stops here
    before = current_revision(engine)  # unreachable: one line from ``main``
    after = upgrade(engine)
    print(f"parkway migrate: {_database(settings)}: {before or 'empty'} -> {after}")
    return 0


def _database(settings: Settings) -> str:
    """The database as a person may be shown it: the embedded one's directory, or the URL without its password."""
    from sqlalchemy.engine import make_url

    if settings.embedded_dir:
        return embedded.describe(settings.embedded_dir)
    return make_url(settings.database_url).render_as_string(hide_password=True)


def _unreachable(exc: Exception) -> str | None:
    """``cannot reach the database at …: why`` when ``exc`` is a failed connection, else ``None``."""
    from sqlalchemy.exc import OperationalError

    from parkway.settings import get_settings

    if not isinstance(exc, OperationalError):
        return None
    # The driver's first line says why: refused, unknown host, bad password, no such database.
    why = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
    return f"cannot reach the database at {_database(get_settings())}: {why}"


def cmd_token_create(args: argparse.Namespace) -> int:
    from models import store
    from parkway.db import get_engine, transaction
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    token = new_token()
    with transaction() as session:
        principal = store.create_principal(session, kind=args.kind, name=args.name, token_hash=hash_token(token))
    if principal is None:
        print(f"parkway token create: the name {args.name!r} is taken", file=sys.stderr)
        return 1
    print(token)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    """Disable the principal: its token gets 401 from now on, its grants are revoked, its page sessions end."""
    from models import principals, store
    from parkway.db import get_engine, transaction
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    with transaction() as session:
        found = store.principal_by_name(session, args.name)
        if found is None:
            print(f"parkway token revoke: no principal is named {args.name!r}", file=sys.stderr)
            return 1
        disabled = principals.disable(session, found.id)
    said = "disabled" if disabled is not None else "was already disabled"
    print(f"parkway token revoke: {found.kind} {args.name} {said}; its token no longer works", file=sys.stderr)
    return 0


def cmd_token_rotate(args: argparse.Namespace) -> int:
    """Give the principal a new token, printed once on stdout alone; the old one stops working."""
    from models import principals, store
    from parkway.db import get_engine, transaction
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    token = new_token()
    with transaction() as session:
        found = store.principal_by_name(session, args.name)
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


def _local(host: str) -> str:
    """Where to reach a server bound to ``host`` from this machine."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


# --------------------------------------------------------------------------- parkway up

API_LISTENING = "Uvicorn running on"  # uvicorn's line once its socket is bound
FLOWER_LISTENING = "Visit me at"  # Flower's, likewise


def _where(settings: Settings) -> str:
    from kombu.utils.url import maybe_sanitize_url

    database = _database(settings)
    if settings.broker_url:
        broker = str(maybe_sanitize_url(settings.broker_url))
    else:
        broker = f"filesystem broker ({settings.broker_folder})"
    return f"{database} + {broker}"


def _only_up_in(home: Path) -> None:
    """Hold ``home``'s ``up.lock`` for as long as this process lives, or refuse: a second ``parkway up`` on
    one home would run a second worker and beat on its database and serve nothing of its own."""
    holder = hold_for_life(home / "up.lock", str(os.getpid()))
    if holder is not None:
        raise ConfigError(
            f"another parkway up (pid {holder}) is running in {home}: stop it first, or give this one a "
            "PARKWAY_HOME of its own"
        )


def cmd_up(args: argparse.Namespace) -> int:
    """Migrate, then run API, worker, beat and Flower until Ctrl-C / SIGTERM, restarting a child that dies
    (until one dies too often)."""
    from parkway.settings import get_settings

    settings = get_settings()
    settings.require_imports()  # now, not after migrating and starting the children that would refuse
    cli_check.refuse_dangling()  # likewise: what `parkway check` reports refuses the stack, its worker too
    home = Path(settings.home).resolve()
    _only_up_in(home)
    settings.resolved_secret_key()  # refuse now, not in four children; makes the embedded key file once
    flower_login = cli_bootstrap.flower_login(home) if args.flower else None  # refused before anything starts
    embedded.start_for_process(settings.embedded_dir)  # shared by the children; stopped on exit if `up` started it
    cmd_migrate(args)
    for line in cli_bootstrap.welcome(settings):  # before any child can fail: tokens are shown only now
        print(f"parkway up: {line}", flush=True)
    env = child_environment()
    env["PARKWAY_HOME"] = str(home)
    py = sys.executable
    celery = [py, "-m", "celery", "-A", "tasks.celery_app:app"]
    api_url = f"http://{_local(args.host)}:{args.port}"
    shown_api = api_url if args.host in ("", "0.0.0.0", "::") else f"http://{args.host}:{args.port}"
    flower_url = f"http://127.0.0.1:{args.flower_port}"
    lock = threading.Lock()
    commands: dict[str, tuple[list[str], Sequence[str], dict[str, str]]] = {
        "api": ([py, "-m", "uvicorn", "api.app:app", "--host", args.host, "--port", str(args.port),
                 "--timeout-graceful-shutdown", "5"], [API_LISTENING], env),
        "worker": ([*celery, "worker", "-l", "info", "-c", str(args.concurrency), "-Q", QUEUES], [" ready."], env),
        "beat": ([*celery, "beat", "-l", "info"], ["beat: Starting"], env),
    }  # fmt: skip
    ready_lines = {
        "api": f"api ready: {shown_api}  (docs {shown_api}/docs, OpenAPI {shown_api}/openapi.json)",
        "worker": f"worker ready: queues {QUEUES.replace(',', ', ')}",
        "beat": f"beat ready: recovery sweep every {settings.sweep_interval_s:g}s",
    }
    flower_where = ""
    if flower_login is not None:
        # Never an open Flower, and its login never on a command line (ps shows those): Flower reads it
        # from FLOWER_BASIC_AUTH in its environment.
        flower_auth, login, flower_where = flower_login
        commands["flower"] = (
            [
                *celery,
                "flower",
                "--address=127.0.0.1",
                f"--port={args.flower_port}",
                "--persistent=False",
                "--inspect_timeout=10000",
            ],
            [FLOWER_LISTENING],
            {**env, "FLOWER_BASIC_AUTH": flower_auth},
        )
        ready_lines["flower"] = f"flower ready: {flower_url}  ({login})"
    children = {
        name: Child(name, cmd, child_env, watch=watch, relay=sys.stderr, relay_lock=lock)
        for name, (cmd, watch, child_env) in commands.items()
    }

    def said(name: str, marker: str) -> str | None:
        return None if marker in children[name].seen else f"it has not said {marker!r} yet"

    ready_checks: dict[str, Callable[[], str | None]] = {
        # Each server's own line first: the URL alone may be answered by another process on that port. The
        # API is ready when /readyz says so (its schema current, the broker reachable), not merely alive.
        "api": lambda: said("api", API_LISTENING) or http_problem(f"{api_url}/readyz"),
        "worker": lambda: said("worker", " ready."),
        "beat": lambda: said("beat", "beat: Starting"),
        "flower": lambda: said("flower", FLOWER_LISTENING) or http_problem(f"{flower_url}/healthcheck"),
    }
    stop = {"signum": 0, "count": 0}

    def on_signal(signum: int) -> None:
        stop["signum"] = stop["signum"] or signum
        stop["count"] += 1

    def say(text: str) -> None:
        print(f"parkway up: {text}", flush=True)

    started = time.monotonic()
    with stop_signals(on_signal):
        print("parkway up: starting", end="", flush=True)
        for child in children.values():
            if stop["count"]:
                break
            child.start()
            print(f" {child.name} (pid {child.pid})…", end="", flush=True)
        print(flush=True)
        policy = RestartPolicy(limit=args.restarts, window_s=args.restart_window)
        supervisor = Supervisor(list(children.values()), ready_checks, ready_lines, stop, say, policy)
        announce = cli_bootstrap.urls(shown_api, flower_url if args.flower else None, flower_where)
        code = supervisor.run(started=started, timeout=args.startup_timeout, where=_where(settings), announce=announce)
        running = ", ".join(c.name for c in children.values() if c.alive())
        if running:
            say(f"stopping {running} (SIGTERM, up to {args.grace:g}s; Ctrl-C again to kill now)…")
        codes = stop_children(list(children.values()), grace_s=args.grace, say=say, hurry=lambda: stop["count"] > 1)
    left = [c.name for c in children.values() if c.group_alive()]
    if left:
        say(f"could not stop {', '.join(left)}")
        return 1
    say("stopped (" + ", ".join(f"{name} {exit_text(rc)}" for name, rc in codes.items()) + ")")
    return code


# --------------------------------------------------------------------------- parkway demo


def cmd_demo(args: argparse.Namespace) -> int:
    from parkway.demo import run_demo

    return run_demo(keep=args.keep, verbose=args.verbose)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parkway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="bring the database schema to the current revision").set_defaults(fn=cmd_migrate)
    token = sub.add_parser("token", help="manage principals' tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="create a principal and print its token once")
    create.add_argument("--kind", required=True, choices=["agent", "human", "admin"])
    create.add_argument("--name", required=True)
    create.set_defaults(fn=cmd_token_create)
    revoke = token_sub.add_parser("revoke", help="disable a principal: its token, grants and page sessions end")
    revoke.add_argument("name", metavar="NAME")
    revoke.set_defaults(fn=cmd_token_revoke)
    rotate = token_sub.add_parser("rotate", help="give a principal a new token and print it once; the old one ends")
    rotate.add_argument("name", metavar="NAME")
    rotate.set_defaults(fn=cmd_token_rotate)
    cli_grants.add_commands(sub.add_parser)
    sweep = sub.add_parser("sweep", help="run the recovery sweep")
    sweep.add_argument("--once", action="store_true", required=True, help="one pass, then exit")
    sweep.add_argument("--batch", type=int, default=None)
    sweep.add_argument("--json", action="store_true", help="print the report as one JSON object, not the line")
    sweep.set_defaults(fn=cmd_sweep)
    cli_workers.add_commands(sub.add_parser)
    cli_check.add_commands(sub.add_parser)
    cli_webhooks.add_commands(sub.add_parser)
    up = sub.add_parser(
        "up",
        help="run the whole stack on this machine (API, worker, beat, Flower)",
        description="Migrate, then run the API, a worker, beat and Flower until Ctrl-C or SIGTERM. A child "
        "that dies is restarted (after 1s, 2s, 4s …) unless it was restarted --restarts times within "
        "--restart-window seconds: then everything stops, exit 1. On the first start of an empty embedded "
        "database it makes an admin, an agent and a human (granted on target 'example') and prints their "
        "tokens, only then. Progress, tokens and URLs go to stdout, the children's logs to stderr "
        "(prefixed with their name).",
    )
    up.add_argument("--host", default="127.0.0.1", help="the API's address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8000, help="the API's port (default 8000)")
    up.add_argument("--flower-port", type=int, default=5555, help="Flower's port on 127.0.0.1 (default 5555)")
    up.add_argument("--no-flower", dest="flower", action="store_false", help="do not start Flower")
    up.add_argument("--concurrency", type=int, default=2, help="worker processes (default 2)")
    up.add_argument("--grace", type=float, default=30.0, help="seconds children get to stop after SIGTERM")
    up.add_argument("--restarts", type=int, default=5, help="restarts of one child allowed within the window (5)")
    up.add_argument("--restart-window", type=float, default=60.0, help="the window of --restarts, seconds (60)")
    up.add_argument("--startup-timeout", type=float, default=60.0, help="seconds to wait for every child to be ready")
    up.set_defaults(fn=cmd_up)
    demo = sub.add_parser(
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Children import `tasks`, `models` … and the workflow modules from this checkout too.
    os.environ["PYTHONPATH"] = child_environment()["PYTHONPATH"]
    # And from the current directory, which `python -m celery` and `python -m uvicorn` put on their path: so
    # does this process (a console script's path starts at its bin/), which imports PARKWAY_IMPORTS too.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    args = build_parser().parse_args(argv)
    from parkway.logs import setup_logging

    setup_logging()
    try:
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
