"""``parkway handler create|list|delete``: push handlers from the shell, as ``/v1/handlers`` manages them
(docs/worker-protocol.md, "Push"). A secret is printed once, alone on stdout."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from parkway.cli_grants import exit_codes

EXIT_CODES = {
    0: "done",
    1: "refused: no such handler, a key that is not a step name or name@version, a URL that may not be reached",
    2: "bad usage, or the database is not reachable or not migrated",
}


def _fail(command: str, text: str) -> int:
    print(f"parkway handler {command}: {text}", file=sys.stderr)
    return 1


def cmd_create(args: argparse.Namespace) -> int:
    from api.protocol_schemas import checked_serves
    from models import store, webhooks
    from parkway.cli_grants import _ready
    from parkway.crypto import seal
    from parkway.db import transaction
    from parkway.settings import get_settings

    serves = [k.strip() for k in args.serves.split(",") if k.strip()]
    try:
        checked_serves(serves)
    except ValueError as exc:
        return _fail("create", str(exc))
    problem = webhooks.input_problem(args.url, None)
    if problem is not None or not serves:
        return _fail("create", problem or "--serves names nothing")
    _ready()
    secret = webhooks.new_secret()
    with transaction() as session:
        handler_id = store.create_handler(
            session, url=args.url, serves=serves, secret_sealed=seal(secret), live_s=get_settings().push_live_s
        ).id
    print(secret)
    print(f"parkway handler create: handler {handler_id} serves {', '.join(serves)} at {args.url}; the secret "
          "above is shown this once", file=sys.stderr)  # fmt: skip
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from models import store
    from parkway.cli_grants import _ready
    from parkway.db import transaction

    _ready()
    print(f"{'ID':<32}  {'ATTEMPTS':>8}  {'FAILURES':>8}  {'SERVES':<30}  URL")
    with transaction() as session:
        for h in store.list_handlers(session):
            print(f"{h.id:<32}  {h.attempts:>8}  {h.failures:>8}  {','.join(h.serves):<30}  {h.url}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from models import store
    from parkway.cli_grants import _ready
    from parkway.db import transaction

    _ready()
    with transaction() as session:
        if not store.delete_handler(session, args.handler_id):
            return _fail("delete", f"no handler has the id {args.handler_id!r} (parkway handler list)")
    return 0


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``handler`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    handler = add_parser("handler", help="manage push handlers (docs/worker-protocol.md, Push)")
    sub = handler.add_subparsers(dest="handler_command", required=True)

    def command(name: str, fn: Callable[[argparse.Namespace], int], text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=text, epilog=exit_codes(EXIT_CODES),
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        parser.set_defaults(fn=fn)
        return parser

    create = command("create", cmd_create, "register a push handler; prints its signing secret once")
    create.add_argument("--url", required=True, help="http(s) URL the work is POSTed to")
    create.add_argument("--serves", required=True, metavar="KEYS", help="comma-separated: deploy.plan,deploy.decide@1")
    command("list", cmd_list, "list the push handlers (never a secret)")
    delete = command("delete", cmd_delete, "remove a push handler")
    delete.add_argument("handler_id", metavar="ID")
