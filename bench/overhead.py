"""What a Celery app's per-task machinery costs in a pool child, without the broker or the pool's pipes.

``python -m bench.overhead {parkway,bare} [N]`` builds Celery's own tracer (what a prefork child runs for
each message, ``celery.app.trace.build_tracer``) for a task that does nothing, on Parkway's app
(``tasks.celery_app``: its signals, log context and JSON lines) or on the bare baseline (``bench.bare``:
Celery's own logging), with logging set up as a ``celery worker -l info`` child has it, and prints the CPU
per task (``time.process_time``, median of 5 rounds). On Parkway's app each piece is also taken away in turn
(through public APIs: ``Signal.disconnect``, a handler's filters and formatter, a logger's level), so the
difference says what that piece costs. Log lines go to /dev/null. Run both apps in one session, beside
each other: only ratios and differences mean anything on a shared machine.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery, signals
from celery.app.trace import build_tracer

ROUNDS = 5


def silence_stderr() -> None:
    """Log lines go to /dev/null (fd 2), the report to stdout."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)


def per_task_us(app: Celery, n: int) -> float:
    """CPU per task (µs) of the tracer of a do-nothing task, built now (it reads receivers and levels)."""
    task = app.tasks["overhead.noop"]
    trace = build_tracer(task.name, task, app=app, eager=False)
    rounds = []
    for _ in range(ROUNDS):
        ids = [uuid.uuid4().hex for _ in range(n)]
        started = time.process_time()
        for task_id in ids:
            request = {"id": task_id, "delivery_info": {"routing_key": "q", "exchange": "q"}, "hostname": "probe"}
            trace(task_id, ("continuation-id",), {}, request)
        rounds.append((time.process_time() - started) / n * 1e6)
    return statistics.median(rounds)


def noop(continuation_id: str) -> str:
    return "committed"


def parkway_app() -> Celery:
    os.environ.setdefault("PARKWAY_BROKER_URL", "redis://127.0.0.1:6379/15")
    os.environ.setdefault("PARKWAY_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    from tasks.celery_app import app

    return app


def bare_app() -> Celery:
    from bench.bare import app

    return app


@contextmanager
def without_receivers(signal: signals.Signal) -> Iterator[None]:
    receivers = list(signal.receivers)
    signal.receivers[:] = []  # the tracer checks this very list
    try:
        yield
    finally:
        signal.receivers[:] = receivers


@contextmanager
def root_handlers(change: Callable[[logging.Handler], Callable[[], None]]) -> Iterator[None]:
    undo = [change(h) for h in logging.getLogger().handlers]
    try:
        yield
    finally:
        for u in undo:
            u()


def no_filters(handler: logging.Handler) -> Callable[[], None]:
    saved = list(handler.filters)
    for f in saved:
        handler.removeFilter(f)
    return lambda: [handler.addFilter(f) for f in saved] and None


def celery_formatter(handler: logging.Handler) -> Callable[[], None]:
    saved = handler.formatter
    handler.setFormatter(logging.Formatter(Celery().conf.worker_log_format))
    return lambda: handler.setFormatter(saved)


@contextmanager
def info_off() -> Iterator[None]:
    logger = logging.getLogger("celery.app.trace")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "parkway"
    n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 5000
    app = parkway_app() if which == "parkway" else bare_app()
    app.task(name="overhead.noop", ignore_result=True)(noop)
    if "--stderr" not in argv:
        silence_stderr()
    app.log.setup(loglevel="INFO", redirect_stdouts=False)  # as a worker's child has it (setup_logging)
    variants: list[tuple[str, Callable[[], Any]]] = [("as shipped", contextlib_null)]
    if which == "parkway":
        variants += [
            ("no task_prerun/postrun receivers", lambda: both(without_receivers(signals.task_prerun),
                                                              without_receivers(signals.task_postrun))),
            ("no task_postrun receiver", lambda: without_receivers(signals.task_postrun)),
            ("no log filter (context)", lambda: root_handlers(no_filters)),
            ("Celery's text format instead of JSON", lambda: root_handlers(celery_formatter)),
            ("no INFO line from the tracer", info_off),
        ]  # fmt: skip
    for label, make in variants * 2:  # twice, interleaved: the second pass is the one reported
        with make():
            us = per_task_us(app, n)
        print(f"{which:8} {label:40} {us:7.1f} µs per task", flush=True)
    return 0


@contextmanager
def contextlib_null() -> Iterator[None]:
    yield


@contextmanager
def both(a: Any, b: Any) -> Iterator[None]:
    with a, b:
        yield


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
