"""``parkway decisions export|verify|key``: the decision record as a file, and whether a file (or the tables
now) still holds what the seal holds (docs/operations.md, "The decision record", "The seal")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path


def _when(text: str) -> datetime:
    from models.decisions import Span

    return Span.instant(text)


def cmd_export(args: argparse.Namespace) -> int:
    """Every decision of the span (an operator's command: every target), written to FILE."""
    from models import decision_export
    from models.decisions import Span
    from parkway.db import get_engine
    from parkway.migrate import require_current_schema

    require_current_schema(get_engine())
    span = Span(args.since, args.until, args.target)
    lines = decision_export.csv_rows if args.format == "csv" else decision_export.ndjson
    with Path(args.file).open("w", encoding="utf-8", newline="") as out:
        out.writelines(lines(None, span))  # every target
    print(f"parkway decisions export: wrote {args.file}", file=sys.stderr)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the file's checkpoints are seals by the key and its decisions are those they sealed (and,
    with ``--live``, the tables now still hold what they sealed); 1 with the first bad seq otherwise."""
    from models.sealing import read_export, verify_export

    with Path(args.file).open(encoding="utf-8") as lines:
        export = read_export(lines)
    verdict = verify_export(export, args.public_key or _own_key())
    if verdict.ok and args.live:
        from models.seal_reads import live_difference

        verdict.finding = next(filter(None, (live_difference(cp) for cp in export.checkpoints)), None)
    print(json.dumps(verdict.as_dict()))
    return 0 if verdict.ok else 1


def cmd_key(args: argparse.Namespace) -> int:
    print(_own_key())
    return 0


def _own_key() -> str:
    from parkway.crypto import seal_public_key

    return seal_public_key()


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``decisions`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    decisions = add_parser("decisions", help="the decision record: export it, verify it against its seal")
    sub = decisions.add_subparsers(dest="decisions_command", required=True)
    export = sub.add_parser("export", help="write the span's decided waits to FILE (NDJSON with the seal, or CSV)")
    export.add_argument("--since", type=_when, help="decided at or after (ISO 8601; UTC unless it says)")
    export.add_argument("--until", type=_when, help="decided before (ISO 8601; UTC unless it says)")
    export.add_argument("--target", help="only the waits on this target")
    export.add_argument("--format", choices=["ndjson", "csv"], default="ndjson")
    export.add_argument("file", metavar="FILE")
    export.set_defaults(fn=cmd_export)
    verify = sub.add_parser(
        "verify",
        help="check an exported FILE against the seal's checkpoints it carries",
        description="Prints one JSON verdict (ok, first_bad_seq, problem, what was checked); exit 0 when ok, "
        "1 when something was changed, added or removed since it was sealed.",
    )
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--public-key", help="the seal's public key (hex; default: this installation's own)")
    verify.add_argument("--live", action="store_true", help="also compare the database now with what was sealed")
    verify.set_defaults(fn=cmd_verify)
    sub.add_parser("key", help="print the seal's Ed25519 public key (hex)").set_defaults(fn=cmd_key)
