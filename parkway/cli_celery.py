"""``python -m parkway.cli_celery``: Celery's own command for the children ``parkway up`` starts (worker,
outbound worker, beat, Flower), importing the subcommand it runs and not the others.

``python -m celery`` loads, as it starts, every subcommand another package plugs into it (Flower's, which
imports Flower and Tornado) and the REPL of its ``amqp`` subcommand (click_repl, prompt_toolkit): a good part
of a worker's or beat's start (bench/RESULTS.md, issue 43), for subcommands they never run. Here none is
plugged in, ``amqp`` gets no REPL, and Flower's subcommand is added for Flower alone; everything else (the
options, the subcommands, what they run) is celery's ``main`` as it is.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn

PLUGGED = "celery.commands"  # the entry-point group celery reads its plugged-in subcommands from
STATELESS_FLOWER = "--persistent=False"  # how parkway up runs Flower: nothing to save at exit


def _plugging_nothing(read: Callable[..., Any]) -> Callable[..., Any]:
    """``importlib.metadata.entry_points`` that finds no plugged-in celery subcommand, and the rest as ``read``."""

    def entry_points(**params: Any) -> Any:
        return importlib.metadata.EntryPoints(()) if params.get("group") == PLUGGED else read(**params)

    return entry_points


def main(argv: list[str]) -> int:
    read = importlib.metadata.entry_points
    importlib.metadata.entry_points = _plugging_nothing(read)  # read once, as the command's module loads
    stub = types.ModuleType("click_repl")  # amqp's REPL: registered on import, never started here
    stub.register_repl = lambda group, name="repl": None  # type: ignore[attr-defined]
    sys.modules.setdefault("click_repl", stub)
    try:
        from celery.bin import celery as command
    finally:
        importlib.metadata.entry_points = read
    if "flower" in argv:
        from flower.command import flower

        command.celery.add_command(flower)
    sys.argv = [sys.argv[0], *argv]
    if "flower" in argv and STATELESS_FLOWER in argv:
        _exit_without_waiting(command.main)
    code: int = command.main()  # click's: it exits itself
    return code


def _exit_without_waiting(run: Callable[[], Any]) -> NoReturn:
    """Run Flower's command, then end the process as soon as it returns (on SIGTERM too), not after Flower's
    inspect threads: each waits up to ``--inspect_timeout`` for replies nobody reads once its loop has
    stopped, which held a ``parkway up`` stopped soon after its start for that long. Flower keeps no state
    here (``--persistent=False``), so its exit handler has nothing to save."""
    try:
        run()
        code: Any = 0
    except SystemExit as exc:  # click's exit, or Flower's own on SIGTERM
        code = exc.code
    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
