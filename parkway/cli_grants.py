"""``parkway grant create|list|revoke`` and ``parkway run start``: grants and a first run from the shell."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable

# parkway run start's exit codes, also shown by its --help.
RUN_EXIT_CODES = {
    0: "the run started; its id is printed on stdout",
    1: "refused: the principal is unknown, disabled or not an agent, or holds no grant on the target, "
    "or the idempotency key was used with another body",
    2: "bad usage: --payload is not JSON, not storable or not what the workflow declares, an option is wrong, "
    "or the database is not reachable or not migrated",
    3: "the workflow is not registered: no module of PARKWAY_IMPORTS defines it",
    4: "no live worker runs the workflow (none is running, or those running were started without its "
    "module): nothing is stored",
}
GRANT_EXIT_CODES = {
    0: "done (revoking a grant already revoked is a no-op)",
    1: "no such principal (or it is disabled) or no such grant",
    2: "bad usage, or the database is not reachable or not migrated",
}


def exit_codes(codes: dict[int, str]) -> str:
    rows = (
        textwrap.fill(text, 100, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, text in codes.items()
    )
    return "exit codes:\n" + "\n".join(rows)


def _fail(command: str, text: str, code: int) -> int:
    print(f"parkway {command}: {text}", file=sys.stderr)
    return code


def _ready() -> None:
    from parkway.db import get_engine
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())


def cmd_grant_create(args: argparse.Namespace) -> int:
    """Give a live principal a target; the new grant's id alone on stdout. On plain psycopg
    (``parkway.pgconn``): a quick command."""
    from models import principal_sql
    from parkway import pgconn
    from parkway.migrate import require_revision, revision_read

    with pgconn.transaction() as conn:
        require_revision(revision_read(conn.execute))
        found = principal_sql.lock_principal(conn.execute, args.principal)
        if found is None or not found[1]:
            why = "is disabled" if found is not None else "does not exist (parkway token create makes one)"
            return _fail("grant create", f"the principal {args.principal!r} {why}", 1)
        grant_id = principal_sql.create_grant(conn.execute, principal_id=found[0], target=args.target)
    print(grant_id)
    return 0


def cmd_grant_list(args: argparse.Namespace) -> int:
    """The grants, oldest first, as ``GET /v1/grants`` lists them: live ones, or revoked ones too with
    ``--all``; by principal and target; one line each, every page."""
    from models import principals
    from parkway.db import transaction

    _ready()
    print(f"{'ID':<36}  {'PRINCIPAL':<20}  {'KIND':<6}  {'TARGET':<20}  {'CREATED (UTC)':<19}  REVOKED (UTC)")
    cursor: str | None = None
    while True:
        with transaction() as session:
            rows, cursor = principals.list_grants(session, principal=args.principal, target=args.target,
                                                  revoked_too=args.all, cursor=cursor, limit=500)  # fmt: skip
        for row in rows:
            revoked = f"{row.revoked_at:%Y-%m-%d %H:%M:%S}" if row.revoked_at is not None else "-"
            print(f"{row.id:<36}  {row.principal:<20}  {row.kind:<6}  {row.target:<20}  "
                  f"{row.created_at:%Y-%m-%d %H:%M:%S}  {revoked}")  # fmt: skip
        if cursor is None:
            return 0


def cmd_grant_revoke(args: argparse.Namespace) -> int:
    from models import access
    from models.store.principals import revoke_grant
    from parkway.db import transaction

    _ready()
    with transaction() as session:
        revoked = revoke_grant(session, args.grant_id)
        found = access.grant_by_id(session, args.grant_id)
        if found is None:
            return _fail("grant revoke", f"no grant has the id {args.grant_id!r} (parkway grant list --all)", 1)
        grant, name = found
        target = grant.target
    said = "revoked" if revoked is not None else "was already revoked"
    print(f"parkway grant revoke: the grant of {name} on {target} {said}")
    return 0


def cmd_run_start(args: argparse.Namespace) -> int:
    """Start a run as an agent, as ``POST /v1/runs`` does; the run's id alone on stdout. On plain psycopg
    (``models.run_start``, the store's statements): the run's first continuation is published by beat's
    sweep, which the start's ``NOTIFY`` wakes."""
    from models import run_start
    from models.jsonsafe import InvalidInput, require_storable
    from parkway import pgconn
    from parkway.errors import Conflict, Forbidden, InvalidPayload
    from parkway.migrate import require_revision, revision_read
    from parkway.settings import get_settings
    from tasks import registry

    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        return _fail("run start", f"--payload is not JSON ({exc}): {args.payload[:80]!r}", 2)
    get_settings().require_imports()
    with pgconn.transaction() as conn:  # connected (or failed) before anything slower is done
        registry.import_workflows()  # before the first statement begins the transaction: no idle timeout
        require_revision(revision_read(conn.execute))
        unserved = _unserved(args.workflow, *run_start.fleet(conn.execute, args.workflow))
        if unserved is not None:
            return _fail("run start", *unserved)
        try:
            require_storable({"payload": payload, "target": args.target, "idempotency_key": args.idempotency_key},
                             "the run")  # fmt: skip
            registry.checked_payload(args.workflow, payload)  # a step of this process's PARKWAY_IMPORTS
            run_id = run_start.start(conn.execute, args.workflow, payload, principal=args.as_, target=args.target,
                                     idempotency_key=args.idempotency_key)  # fmt: skip
        except (Forbidden, Conflict) as exc:
            return _fail("run start", str(exc), 1)
        except (InvalidInput, InvalidPayload) as exc:
            return _fail("run start", str(exc), 2)
    print(run_id)
    print(f"parkway run start: run {run_id} of {args.workflow} started as {args.as_} on target {args.target}; "
          f"GET /v1/runs/{run_id} follows it", file=sys.stderr)  # fmt: skip
    return 0


def _not_named(workflow: str) -> str:
    from parkway.settings import get_settings

    return f"no workflow is named {workflow!r} (PARKWAY_IMPORTS imports {get_settings().imports or 'nothing'})"


def _unserved(workflow: str, served: bool, anyone_live: bool) -> tuple[str, int] | None:
    """Why no run of ``workflow`` should start, with the exit code, when no live worker runs it (today's
    fleet, ``parkway workers``): its run would wait for one, or be interrupted once the grace ran out.
    The workflows of ``PARKWAY_IMPORTS`` are imported already."""
    from tasks import registry

    if served:  # a live Celery worker runs it, or a remote one leases it
        return None
    if not registry.has_step(workflow):
        return _not_named(workflow), 3
    if not anyone_live:
        return (f"no worker is running, so nothing would run {workflow}: start one (make run, parkway up, or "
                "celery -A tasks.celery_app:app worker), then start the run; nothing was stored"), 4  # fmt: skip
    return (f"no live worker runs {workflow}: the running workers were started without its module ("
            "parkway workers lists what each runs; restart them with it in PARKWAY_IMPORTS); nothing was stored",
            4)  # fmt: skip


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``grant`` and ``run`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    raw = argparse.RawDescriptionHelpFormatter
    grant = add_parser("grant", help="give principals targets, list and revoke grants")
    grant_sub = grant.add_subparsers(dest="grant_command", required=True)
    create = grant_sub.add_parser(
        "create", help="grant a principal a target; prints the grant's id", epilog=exit_codes(GRANT_EXIT_CODES),
        formatter_class=raw,
    )  # fmt: skip
    create.add_argument("--principal", required=True, metavar="NAME")
    create.add_argument("--target", required=True, metavar="TARGET")
    create.set_defaults(fn=cmd_grant_create)
    listing = grant_sub.add_parser("list", help="list the live grants (as GET /v1/grants)",
                                   epilog=exit_codes(GRANT_EXIT_CODES), formatter_class=raw)  # fmt: skip
    listing.add_argument("--all", action="store_true", help="revoked grants too")
    listing.add_argument("--principal", metavar="NAME", help="only this principal's")
    listing.add_argument("--target", metavar="TARGET", help="only those on this target")
    listing.set_defaults(fn=cmd_grant_list)
    revoke = grant_sub.add_parser("revoke", help="revoke a grant by id", epilog=exit_codes(GRANT_EXIT_CODES),
                                  formatter_class=raw)  # fmt: skip
    revoke.add_argument("grant_id", metavar="ID")
    revoke.set_defaults(fn=cmd_grant_revoke)
    run = add_parser("run", help="start a run from the shell")
    run_sub = run.add_subparsers(dest="run_command", required=True)
    start = run_sub.add_parser(
        "start",
        help="start a run of WORKFLOW as an agent (as POST /v1/runs does); prints its id",
        epilog=exit_codes(RUN_EXIT_CODES),
        formatter_class=raw,
    )
    start.add_argument("workflow", metavar="WORKFLOW")
    start.add_argument("--payload", default="{}", metavar="JSON", help="the run's input, JSON (default {})")
    start.add_argument("--as", dest="as_", required=True, metavar="NAME", help="the agent that owns the run")
    start.add_argument("--target", required=True, metavar="TARGET", help="a target the agent holds a grant on")
    start.add_argument("--idempotency-key", default=None, metavar="KEY", help="a retry with it returns the same run")
    start.set_defaults(fn=cmd_run_start)
