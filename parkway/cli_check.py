"""``parkway check``: every ``Park``/``Next`` reference of the workflow modules resolves (``tasks.wiring``);
also what ``parkway up`` asks before it starts anything."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from parkway.errors import ConfigError


def cmd_check(_: argparse.Namespace) -> int:
    """One line per reference that does not resolve (``path:line: …``) and exit 1; else a summary, exit 0."""
    from parkway.settings import get_settings
    from tasks import wiring

    get_settings().require_imports()
    report = wiring.check_workflows()
    for problem in report.problems:
        print(problem.line_text())
    if report.problems:
        print(f"parkway check: {wiring.count_text(report.problems)}", file=sys.stderr)
        return 1
    print(f"parkway check: {report.summary()}")
    return 0


def refuse_dangling() -> str:
    """The summary of ``parkway check``, or ``ConfigError`` with its lines: ``parkway up`` starts nothing then."""
    from tasks import wiring

    report = wiring.check_workflows()
    if report.problems:
        lines = "".join(f"\n{problem.line_text()}" for problem in report.problems)
        raise ConfigError(f"refusing to start: {wiring.count_text(report.problems)}:{lines}")
    return report.summary()


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """``check`` on the ``parkway`` parser (``add_parser`` is its subparsers' method)."""
    check = add_parser(
        "check",
        help="check that every Park and Next of the workflow modules names a registered continuation or step",
        description="Import PARKWAY_IMPORTS as the worker does and read the source of those modules and of "
        "every module that registered a step or continuation: each Park(continuation=...) and Next(step, ...) "
        "that names a string, a module-level constant or a decorated function must resolve in the registry. "
        "A name computed at run time is counted, not checked. Exit 0 (a summary), 1 (one line per reference "
        "that does not resolve: path:line: what), 2 (PARKWAY_IMPORTS names a module that cannot be found). "
        "parkway up runs it first, and a worker at its start (where a key another live worker runs resolves).",
    )
    check.set_defaults(fn=cmd_check)
