"""Structured logs: JSON lines when stderr is not a terminal, key=value text when it is. No secrets."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_FIELDS = (
    "action",
    "run_id",
    "step_id",
    "continuation_id",
    "interaction_id",
    "execution_id",
    "task_id",
    "outcome",
    "counts",
    "trace_id",
    "span_id",
)


_context: ContextVar[dict[str, Any] | None] = ContextVar("parkway_log_context", default=None)


@contextmanager
def bound(**ids: Any) -> Iterator[None]:
    """Every log line inside this block carries these ids (run, step, continuation, execution)."""
    token = _context.set({**(_context.get() or {}), **ids})
    try:
        yield
    finally:
        _context.reset(token)


def set_context(ids: dict[str, Any] | None) -> None:
    """Replace the ids of the current context (Celery's task start and end)."""
    _context.set(dict(ids) if ids else None)


def in_context() -> bool:
    """Whether ids are bound here (a Celery task's context, or a ``bound`` block)."""
    return _context.get() is not None


def bind(**ids: Any) -> None:
    """Add ids to the current block's context (after a claim reveals the run and step)."""
    current = _context.get()
    if current is not None:
        current.update(ids)


def _traced_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids, when traced; no span is current in a process that never imported
    ``parkway.tracing`` (a quick CLI command does not pay for OpenTelemetry's import)."""
    tracing = sys.modules.get("parkway.tracing")
    ids: tuple[str, str] | None = None if tracing is None else tracing.ids()
    return ids


class ContextFilter(logging.Filter):
    """Copies the bound ids onto each record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in (_context.get() or {}).items():
            if not hasattr(record, name):
                setattr(record, name, value)
        traced = _traced_ids()
        if traced is not None and not hasattr(record, "trace_id"):
            record.trace_id, record.span_id = traced
        return True


class JsonFormatter(logging.Formatter):
    # One encoder for every line: ``json.dumps(..., default=str)`` builds a new one per call.
    encoder = json.JSONEncoder(default=str)

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = record.__dict__  # the ids are the record's own attributes (``extra``, ``ContextFilter``)
        for name in _FIELDS:
            if name in fields:
                line[name] = fields[name]
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return self.encoder.encode(line)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{n}={getattr(record, n)}" for n in _FIELDS if hasattr(record, n))
        base = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        text = f"{base} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


# An approval link's token is a bearer secret (docs/teams.md): its path is logged without it.
LINK_TOKEN = re.compile(r"(/links/)pl_[A-Za-z0-9_-]+")


class LinkTokenFilter(logging.Filter):
    """Removes approval link tokens from uvicorn's access lines (``client, method, path, version, status``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 2 and isinstance(args[2], str):
            record.args = (*args[:2], LINK_TOKEN.sub(r"\1pl_…", args[2]), *args[3:])
        return True


class QuietTasks(logging.Filter):
    """Celery's INFO lines about ``tasks`` (a worker's "received", "succeeded in" and "Discarding revoked task" of
    one that expired in the queue, beat's "Sending due task") as DEBUG lines: a periodic task that found nothing
    to do is no line at INFO (it says what it did itself)."""

    LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.worker.request", "celery.beat")

    def __init__(self, tasks: tuple[str, ...]) -> None:
        super().__init__()
        self.tasks = tasks

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or record.name not in self.LOGGERS or not self._about_tasks(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)

    def _about_tasks(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)  # the worker's lines carry their task in ``extra``
        named = data.get("name") if isinstance(data, dict) else None
        args = record.args if isinstance(record.args, tuple) else ()  # beat's (entry, task), a discard's (task, id)
        return named in self.tasks or any(arg in self.tasks for arg in args)


def setup_logging(level: int = logging.INFO, *, root: bool = False, quiet_tasks: tuple[str, ...] = ()) -> None:
    """Attach one structured handler (idempotent): to the ``parkway`` logger, or with ``root`` to the
    root logger so Celery's own lines are structured too (those about ``quiet_tasks`` at DEBUG). Uvicorn's
    access lines lose link tokens."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, LinkTokenFilter) for f in access.filters):
        access.addFilter(LinkTokenFilter())
    logger = logging.getLogger() if root else logging.getLogger("parkway")
    if any(getattr(h, "_parkway", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if sys.stderr.isatty() else JsonFormatter())
    handler.addFilter(ContextFilter())
    if quiet_tasks:
        handler.addFilter(QuietTasks(quiet_tasks))
    handler._parkway = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    if root:
        parkway = logging.getLogger("parkway")
        parkway.handlers = [h for h in parkway.handlers if not getattr(h, "_parkway", False)]
        parkway.propagate = True
    else:
        logger.propagate = False
