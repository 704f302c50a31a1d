"""``parkway workers``: the live workers, each one's kind, what it runs, since when and its last heartbeat, and
the continuation versions work still waits on with the grace left of each no live worker runs, as
``GET /v1/workers`` shows them (docs/operations.md, "Rolling deploys")."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _when(at: datetime) -> str:
    return f"{at:%Y-%m-%dT%H:%M:%SZ}"


def _json(value: Any) -> Any:
    return _when(value) if isinstance(value, datetime) else str(value)


def _grace(left: float | None) -> str:
    """The grace left of a version no live worker runs, as an operator reads it."""
    if left is None:
        return "grace paused while its fleet is down"
    if left <= 0:
        return "grace over: its waits are interrupted at the next sweep"
    minutes, seconds = divmod(int(left + 0.5), 60)
    return f"grace {minutes}m{seconds:02d}s left"


def _kind(w: Any) -> str:
    return {"remote": "remote (HTTP worker protocol)", "push": "push handler"}.get(w.kind, f"celery pid {w.pid}")


def cmd_workers(args: argparse.Namespace) -> int:
    """One line per live worker and its keys under it, then each version parked or due work needs."""
    from models import fleet_view
    from parkway import pgconn
    from parkway.migrate import require_revision, revision_read
    from parkway.settings import get_settings

    with pgconn.transaction() as conn:  # plain psycopg: the store's two reads as compiled text (models/fleet_sql.py)
        require_revision(revision_read(conn.execute))
        workers = fleet_view.live_workers(conn.execute)
        loads = fleet_view.versions(conn.execute, grace_s=get_settings().version_grace_s)
    if args.json:
        listing = {"items": [dataclasses.asdict(w) for w in workers], "next": None,
                   "versions": [dataclasses.asdict(v) for v in loads]}  # fmt: skip
        print(json.dumps(listing, default=_json))
        return 0
    if not workers:
        print("no live worker")
    for w in workers:
        counts = f"{_plural(len(w.steps), 'step')}, {_plural(len(w.continuations), 'continuation')}"
        print(f"{w.node}  {_kind(w)}  since {_when(w.started_at)}  heartbeat {_when(w.heartbeat_at)}  {counts}")
        print(f"  steps: {' '.join(w.steps) or '-'}")
        print(f"  continuations: {' '.join(w.continuations) or '-'}")
    if loads:
        print("versions work still needs:")
    for v in loads:
        served = "served" if v.served else f"no live worker runs it; {_grace(v.grace_left_s)}"
        print(f"  {v.version}  {v.parked} parked, {v.due} due  {served}")
    return 0


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``workers`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    workers = add_parser(
        "workers",
        help="list the live workers, what each runs, and the versions work still waits on",
        description="A version is safe to retire (stop every worker that runs it) once it is not listed under "
        "'versions work still needs'. Exit 0, also with no live worker.",
    )
    workers.add_argument("--json", action="store_true", help="print what GET /v1/workers returns, as one object")
    workers.set_defaults(fn=cmd_workers)
