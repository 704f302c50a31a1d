"""``parkway webhook create|list|show|disable|enable|rotate|replay|delete``: webhook subscriptions from the
shell, as the admin API manages them (docs/webhooks.md). A secret is printed once, alone on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from parkway.cli_grants import exit_codes

EXIT_CODES = {
    0: "done",
    1: "refused: no such subscription, an event type that names nothing, a URL that may not be reached, or a "
    "replay ahead of the cursor",
    2: "bad usage, or the database is not reachable or not migrated",
}


def _fail(command: str, text: str) -> int:
    print(f"parkway webhook {command}: {text}", file=sys.stderr)
    return 1


def _shown(hook: Any) -> dict[str, Any]:
    fields = ("id", "url", "events", "targets", "description", "status", "reason", "cursor")
    return {name: getattr(hook, name) for name in fields} | {"created_at": hook.created_at.isoformat()}


def cmd_create(args: argparse.Namespace) -> int:
    from models import store, webhooks
    from parkway.cli_grants import _ready
    from parkway.crypto import seal
    from parkway.db import transaction

    events = [e.strip() for e in args.events.split(",") if e.strip()]
    problem = webhooks.input_problem(args.url, events)
    if problem is not None or not events:
        return _fail("create", problem or "--events names no event type")
    _ready()
    secret = webhooks.new_secret()
    with transaction() as session:
        hook = store.create_webhook(session, url=args.url, events=events, targets=args.target or None,
                                    description=args.description, secret_sealed=seal(secret))  # fmt: skip
        webhook_id = hook.id
    print(secret)
    print(f"parkway webhook create: webhook {webhook_id} sends {', '.join(events)} to {args.url}; the secret "
          "above is shown this once", file=sys.stderr)  # fmt: skip
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from models import webhooks
    from parkway.cli_grants import _ready
    from parkway.db import transaction

    _ready()
    print(f"{'ID':<32}  {'STATUS':<8}  {'EVENTS':<30}  URL")
    cursor = None
    while True:
        with transaction() as session:
            hooks, cursor = webhooks.list_webhooks(session, cursor=cursor, limit=200)
            for hook in hooks:
                print(f"{hook.id:<32}  {hook.status:<8}  {','.join(hook.events):<30}  {hook.url}")
        if cursor is None:
            return 0


def _change(args: argparse.Namespace, command: str, change: Callable[[Any], Any]) -> tuple[int, Any]:
    """Run ``change(session)`` on the subscription in one transaction: (0, what it returned), or (1, None)
    said on stderr when it returned nothing (an unknown id, or a replay ahead of the cursor)."""
    from models import webhooks
    from parkway.cli_grants import _ready
    from parkway.db import transaction

    _ready()
    with transaction() as session:
        done = change(session)
        if not done:
            if webhooks.get_webhook(session, args.webhook_id) is None:
                return _fail(command, f"no webhook has the id {args.webhook_id!r} (parkway webhook list)"), None
            return _fail(command, f"its cursor is before {args.after_seq}: a replay goes back only"), None
        return 0, (_shown(done) if done is not True else None)


def _printed(outcome: tuple[int, Any]) -> int:
    code, shown = outcome
    if shown is not None:
        print(json.dumps(shown))
    return code


def cmd_show(args: argparse.Namespace) -> int:
    from models import webhooks

    return _printed(_change(args, "show", lambda session: webhooks.get_webhook(session, args.webhook_id)))


def cmd_enable(args: argparse.Namespace) -> int:
    """enabled (failing|disabled -> active, from its cursor) or disabled, as PATCH ``enabled`` does."""
    from models import store

    enabled = args.webhook_command == "enable"
    change = lambda session: store.update_webhook(session, args.webhook_id, {}, enabled)  # noqa: E731
    return _printed(_change(args, args.webhook_command, change))


def cmd_rotate(args: argparse.Namespace) -> int:
    """A new secret, alone on stdout; the old one signs too for ``--overlap-s``."""
    from models import store, webhooks
    from parkway.crypto import seal

    secret = webhooks.new_secret()
    change = lambda session: store.rotate_secret(session, args.webhook_id, seal(secret), args.overlap_s)  # noqa: E731
    code, _ = _change(args, "rotate", change)
    if code == 0:
        print(secret)
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    from models import store
    from tasks.publish import publish_webhooks

    outcome = _change(args, "replay", lambda session: store.replay(session, args.webhook_id, args.after_seq))
    if outcome[0] == 0:
        publish_webhooks([args.webhook_id])  # after the commit; the sweep sends it should this be lost
    return _printed(outcome)


def cmd_delete(args: argparse.Namespace) -> int:
    from models import store

    return _printed(_change(args, "delete", lambda session: store.delete_webhook(session, args.webhook_id)))


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``webhook`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    webhook = add_parser("webhook", help="manage webhook subscriptions (docs/webhooks.md)")
    sub = webhook.add_subparsers(dest="webhook_command", required=True)

    def command(name: str, fn: Callable[[argparse.Namespace], int], text: str, *, by_id: bool = True) -> Any:
        parser = sub.add_parser(name, help=text, epilog=exit_codes(EXIT_CODES),
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        if by_id:
            parser.add_argument("webhook_id", metavar="ID")
        parser.set_defaults(fn=fn)
        return parser

    create = command("create", cmd_create, "subscribe a URL; prints its signing secret once", by_id=False)
    create.add_argument("--url", required=True, help="http(s) URL of the receiver")
    create.add_argument("--events", required=True, metavar="TYPES", help="comma-separated: run.completed,interaction.*")
    create.add_argument("--target", action="append", metavar="TARGET", help="only these targets' events (repeat)")
    create.add_argument("--description", default=None)
    command("list", cmd_list, "list the subscriptions", by_id=False)
    command("show", cmd_show, "show one subscription as JSON (never its secret)")
    command("disable", cmd_enable, "stop delivering")
    command("enable", cmd_enable, "resume delivering from where it stopped")
    rotate = command("rotate", cmd_rotate, "a new signing secret, printed once; the old one signs too for a while")
    rotate.add_argument("--overlap-s", type=float, default=86400.0, help="seconds both sign (default 86400)")
    replay = command("replay", cmd_replay, "send the events after a seq again, with their first webhook-ids")
    replay.add_argument("--after-seq", type=int, required=True, metavar="SEQ")
    command("delete", cmd_delete, "delete a subscription and its delivery log")
