"""What every case shares: the ``Bench`` (options, services, metrics) and the helpers the cases use."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from bench import seed
from bench.harness import (
    Services,
    log,
    private_redis_pid,
    proc_cpu_ms,
    thread_cpu_ms,
)
from bench.stats import Metric
from bench.workflows import DONE, QUEUE
from parkway.db import transaction
from tasks.celery_app import app


@dataclass
class Bench:
    """What every case shares: options, services, the metrics table and raw records for the JSON."""

    args: Any
    services: Services
    http_token: str
    metrics: dict[tuple[str, str], Metric] = field(default_factory=dict)
    raw: dict[str, list[Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    next_row: int = 1
    api_pid: int | None = None

    def metric(self, case: str, name: str, unit: str, target: str | None = None, note: str = "") -> Metric:
        key = (case, name)
        if key not in self.metrics:
            self.metrics[key] = Metric(case=case, name=name, unit=unit, target=target, note=note)
        return self.metrics[key]

    def record(self, case: str, item: dict[str, Any]) -> None:
        self.raw.setdefault(case, []).append(item)

    def check_foreign(self, where: str) -> None:
        """Warn (and record) when a worker that is not the bench's answers on the bench's broker: it
        would take the bench's messages and run them against another database."""
        try:
            replies = app.control.ping(timeout=1.0) or []
        except Exception as exc:
            log(f"    could not ping workers ({where}): {exc}")
            return
        names = sorted(name for reply in replies for name in reply if not name.startswith("bench"))
        if names:
            log(f"WARNING: foreign workers on the bench's broker {where}: {', '.join(names)}; results are suspect")
            self.skipped.setdefault("contamination", "")
            self.skipped["contamination"] += f"{where}: {', '.join(names)}; "

    def rows(self, count: int) -> list[int]:
        ids = seed.seed_rows(self.next_row, count)
        self.next_row += count
        return ids


# --------------------------------------------------------------------------- helpers


class Producers:
    """``threads`` threads calling ``fn(item)`` over ``items`` as fast as they can, started together."""

    def __init__(self, items: Sequence[Any], fn: Callable[[Any], Any], threads: int) -> None:
        self.errors: list[str] = []
        self.started = 0.0
        self.finished = 0.0
        self._barrier = threading.Barrier(threads + 1)
        self.threads = [
            threading.Thread(target=self._work, args=(list(items[i::threads]), fn), daemon=True) for i in range(threads)
        ]

    def _work(self, chunk: list[Any], fn: Callable[[Any], Any]) -> None:
        self._barrier.wait()
        for item in chunk:
            try:
                fn(item)
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def start(self) -> float:
        for thread in self.threads:
            thread.start()
        self.started = time.time()
        self._barrier.wait()
        return self.started

    def join(self) -> float:
        for thread in self.threads:
            thread.join()
        self.finished = time.time()
        return self.finished


def check_workers(services: Services) -> None:
    """A worker that died mid-case fails the case at once, with its last output."""
    for worker in services.workers:
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker {worker.name} died:\n{worker.text()[-3000:]}")


def wait_count(
    count: Callable[[], int], target: int, *, timeout: float, what: str, services: Services, poll: float = 0.05
) -> float:
    """Poll until ``count() >= target``; returns the time it was first seen."""
    deadline = time.monotonic() + timeout
    last_report = time.monotonic()
    while True:
        value = count()
        now = time.time()
        if value >= target:
            return now
        check_workers(services)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}: {value}/{target}")
        if time.monotonic() - last_report > 15:
            log(f"    … {what}: {value}/{target}")
            last_report = time.monotonic()
        time.sleep(poll)


def park_many(
    bench: Bench, count: int, *, snapshot: dict[str, Any] | None = None, continuation: str = DONE
) -> list[seed.Parked]:
    if bench.args.seed == "bulk" or continuation != DONE:  # the store path parks as bench.ask does: on DONE
        return seed.bulk_parked(count, snapshot=snapshot, continuation=continuation)
    return seed.seed_parked(count, snapshot=snapshot)


class CpuMeter:
    """CPU time (user + system, from /proc) the bench's processes spend on a run: the workers (main and
    pool children), this database's PostgreSQL backends, the private Redis (with --private-redis) and the
    producer (this process), and ``others`` by name (a process of the case's own, such as a webhook receiver).
    Per unit of work it does not depend on how busy the machine is. ``split(units)``: the workers' share by
    thread, apart from the total: the Celery main process, the pool children's main threads (the task bodies)
    and their other threads (lease keeper, projector, a tracing export thread)."""

    def __init__(self, bench: Bench, others: dict[str, int] | None = None) -> None:
        self.bench, self.others = bench, others or {}
        self.start: dict[str, dict[int, float]] = {}

    def _pg_pids(self) -> list[int]:
        with transaction() as session:
            rows = session.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).all()
        return [int(r[0]) for r in rows]

    def _threads(self) -> dict[str, dict[int, float]]:
        split: dict[str, dict[int, float]] = {"celery main": {}, "children main": {}, "children other": {}}
        for worker in self.bench.services.workers:
            split["celery main"].update(thread_cpu_ms(worker.proc.pid))
            for pid in worker.pool_children():
                for tid, ms in thread_cpu_ms(pid).items():
                    split["children main" if tid == pid else "children other"][tid] = ms
        return split

    def _snapshot(self) -> dict[str, dict[int, float]]:
        workers: dict[int, float] = {}
        for worker in self.bench.services.workers:
            for pid in [worker.proc.pid, *worker.pool_children()]:
                workers[pid] = proc_cpu_ms(pid)
        redis_pid = private_redis_pid()
        return {
            "workers": workers,
            "postgres": {pid: proc_cpu_ms(pid) for pid in self._pg_pids()},
            "redis": {redis_pid: proc_cpu_ms(redis_pid)} if redis_pid else {},
            "producer": {0: (lambda t: (t.user + t.system) * 1000)(os.times())},
            "api": {self.bench.api_pid: proc_cpu_ms(self.bench.api_pid)} if self.bench.api_pid else {},
            **{name: {pid: proc_cpu_ms(pid)} for name, pid in self.others.items()},
        }

    def __enter__(self) -> CpuMeter:
        self.start, self.threads_start = self._snapshot(), self._threads()
        return self

    def __exit__(self, *_: object) -> None:
        self.end, self.threads_end = self._snapshot(), self._threads()

    def per_unit(self, units: int) -> dict[str, float]:
        out = _per_unit(self.start, self.end, units)
        out["total"] = sum(out.values())
        return out

    def split(self, units: int) -> dict[str, float]:
        return _per_unit(self.threads_start, self.threads_end, units)


def _per_unit(start: dict[str, dict[int, float]], end: dict[str, dict[int, float]], units: int) -> dict[str, float]:
    """Each kind's CPU between two snapshots, per unit (a pid or thread that ended inside loses its share)."""
    out: dict[str, float] = {}
    for kind, now in end.items():
        before = start.get(kind, {})
        out[kind] = sum(max(0.0, ms - before.get(key, 0.0)) for key, ms in now.items()) / units
    return out


def record_cpu(bench: Bench, variant: str, cpu: dict[str, float]) -> None:
    for kind in ("total", "workers", "postgres", "redis", "producer", "api"):
        if (kind == "redis" and private_redis_pid() is None) or (kind == "api" and "HTTP" not in variant):
            continue
        bench.metric("cpu", f"{variant}: CPU per unit, {kind}", "ms").add(cpu[kind])


def wait_drained(
    bench: Bench, producers_done: Callable[[], bool], *, timeout: float, what: str, poll: float = 0.05
) -> float:
    """Once the producers are done, wait until no continuation is ``ready`` or ``claimed``: everything
    they made due is consumed. Returns the time that was first seen."""
    deadline = time.monotonic() + timeout
    last_report = time.monotonic()
    while True:
        done = producers_done()
        pending = seed.count_pending_continuations()
        now = time.time()
        if done and pending == 0:
            return now
        check_workers(bench.services)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}: {pending} still pending")
        if time.monotonic() - last_report > 15:
            log(f"    … {what}: {pending} pending{'' if done else ', producers still running'}")
            last_report = time.monotonic()
        time.sleep(poll)


def check_consumed(before: int, expected: int, what: str) -> None:
    """After the timed window: the consumed count moved by exactly what was expected."""
    got = seed.count_consumed_resumes() - before
    if got != expected:
        raise RuntimeError(f"{what}: {got} continuations consumed, expected {expected}")


def answer_fn(principal: str) -> Callable[[seed.Parked], Any]:
    from tasks import sdk

    def answer(p: seed.Parked) -> Any:
        return sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=principal)

    return answer


def send_fn(task: str) -> Callable[[int], Any]:
    def send(row_id: int) -> Any:
        return app.send_task(task, args=[row_id], queue=QUEUE)

    return send


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "?"
