"""The ``parkway`` command (SPEC §7): migrate, token create, sweep --once, up."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from parkway.errors import ParkwayError


def hash_token(token: str) -> str:
    """Tokens are random and high-entropy: a plain SHA-256 is what is stored and looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "pk_" + secrets.token_urlsafe(32)


def cmd_migrate(_: argparse.Namespace) -> int:
    from parkway.db import get_engine
    from parkway.migrate import current_revision, upgrade
    from parkway.settings import get_settings

    settings = get_settings()
    engine = get_engine()
    before = current_revision(engine)
    after = upgrade(engine)
    where = "embedded SQLite" if settings.embedded_database else engine.url.render_as_string(hide_password=True)
    print(f"parkway migrate: {where}: {before or 'empty'} -> {after}", file=sys.stderr)
    return 0


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


def cmd_sweep(args: argparse.Namespace) -> int:
    from beat.sweep import run_sweep
    from parkway.db import get_engine
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    report = run_sweep(batch=args.batch)
    print(report.line())
    if args.json:
        print(json.dumps(report.as_dict()))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from parkway.settings import get_settings

    settings = get_settings()
    settings.resolved_secret_key()
    cmd_migrate(args)
    py = sys.executable
    celery = [py, "-m", "celery", "-A", "tasks.celery_app:app"]
    procs: dict[str, list[str]] = {
        "worker": [
            *celery,
            "worker",
            "-l",
            "info",
            "-c",
            str(args.concurrency),
            "-Q",
            "parkway.steps,parkway.continuations,parkway.sweep",
        ],
        "beat": [*celery, "beat", "-l", "info"],
    }
    if _importable("api.app"):
        procs["api"] = [py, "-m", "uvicorn", "api.app:app", "--host", args.host, "--port", str(args.port)]
    where = "embedded SQLite + filesystem broker" if settings.embedded_database else "configured services"
    print(f"parkway up: starting {', '.join(procs)} on {where}", flush=True)
    children = {name: subprocess.Popen(cmd) for name, cmd in procs.items()}
    if "api" in children:
        print(f"parkway up: api on http://{args.host}:{args.port}", flush=True)
    stopping = {"flag": False}

    def stop(signum: int, _frame: object) -> None:
        stopping["flag"] = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping["flag"]:
        for name, proc in children.items():
            if proc.poll() is not None:
                print(f"parkway up: {name} exited with {proc.returncode}; stopping the rest", file=sys.stderr)
                stopping["flag"] = True
                code = 1
        time.sleep(0.2)
    _stop_children(children, grace_s=args.grace)
    return code


def _stop_children(children: dict[str, subprocess.Popen[bytes]], *, grace_s: float) -> None:
    """SIGTERM (warm shutdown: work in flight stays claimed and is re-driven), then SIGKILL after grace."""
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for name, proc in children.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"parkway up: {name} did not stop in {grace_s}s; killing it", file=sys.stderr)
            proc.kill()
            proc.wait()
    print("parkway up: stopped", file=sys.stderr)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


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
    sweep = sub.add_parser("sweep", help="run the recovery sweep")
    sweep.add_argument("--once", action="store_true", required=True, help="one pass, then exit")
    sweep.add_argument("--batch", type=int, default=None)
    sweep.add_argument("--json", action="store_true", help="also print the report as JSON")
    sweep.set_defaults(fn=cmd_sweep)
    up = sub.add_parser("up", help="run the whole stack on this machine")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--concurrency", type=int, default=2)
    up.add_argument("--grace", type=float, default=30.0, help="seconds children get to stop after SIGTERM")
    up.set_defaults(fn=cmd_up)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Run from the project directory so `tasks`, `models` … import for the child processes too.
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    args = build_parser().parse_args(argv)
    from parkway.logs import setup_logging

    setup_logging()
    try:
        code: int = args.fn(args)
    except ParkwayError as exc:
        print(f"parkway {args.command}: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
