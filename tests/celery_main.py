"""``python -m celery`` for the suite's workers and beats (tests/support.py), without what only the celery
command's other subcommands use: the subcommands other packages plug into it (Flower's, which imports
Flower and Tornado) and the ``amqp`` subcommand's REPL (click_repl, prompt_toolkit). The worker and beat
subcommands, their options and everything they run are celery's own, unchanged; the imports left out were a
good part of each start's CPU (bench/RESULTS.md)."""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any

_entry_points = importlib.metadata.entry_points


def _no_plugged_commands(**params: Any) -> Any:
    if params.get("group") == "celery.commands":
        return importlib.metadata.EntryPoints(())
    return _entry_points(**params)


if __name__ == "__main__":
    importlib.metadata.entry_points = _no_plugged_commands  # read once, as celery.bin.celery is imported
    repl = types.ModuleType("click_repl")
    repl.register_repl = lambda group, name="repl": None  # type: ignore[attr-defined]
    sys.modules.setdefault("click_repl", repl)
    from celery.__main__ import main

    main()
