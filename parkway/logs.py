"""Structured logs: JSON lines when stderr is not a terminal, key=value text when it is. No secrets."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_FIELDS = ("action", "run_id", "step_id", "continuation_id", "interaction_id", "execution_id", "outcome", "counts")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{n}={getattr(record, n)}" for n in _FIELDS if hasattr(record, n))
        base = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        text = f"{base} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(level: int = logging.INFO) -> None:
    """Attach one handler to the ``parkway`` logger (idempotent)."""
    logger = logging.getLogger("parkway")
    if any(getattr(h, "_parkway", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if sys.stderr.isatty() else JsonFormatter())
    handler._parkway = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
