"""The four cases, each measured beside its baseline in the same run."""

from __future__ import annotations

import contextlib
import cProfile
import io
import math
import os
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from bench import seed
from bench.harness import (
    Services,
    free_port,
    log,
    private_redis_pid,
    proc_cpu_ms,
    proc_memory,
    spawn,
    stop_process,
)
from bench.sqlprof import StatementProfile
from bench.stats import Metric, percentile
from bench.workflows import CAS, CAS_LAT, COMMIT_KEY, QUEUE
from parkway.db import reset_engine, transaction
from parkway.settings import get_settings, reset_settings
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


def park_many(bench: Bench, count: int, *, snapshot: dict[str, Any] | None = None) -> list[seed.Parked]:
    if bench.args.seed == "bulk":
        return seed.bulk_parked(count, snapshot=snapshot)
    return seed.seed_parked(count, snapshot=snapshot)


class CpuMeter:
    """CPU time (user + system, from /proc) the bench's processes spend on a run: the workers (main and
    pool children), this database's PostgreSQL backends, the private Redis (with --private-redis) and the
    producer (this process). Per unit of work it does not depend on how busy the machine is."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.start: dict[str, dict[int, float]] = {}

    def _pg_pids(self) -> list[int]:
        with transaction() as session:
            rows = session.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).all()
        return [int(r[0]) for r in rows]

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
        }

    def __enter__(self) -> CpuMeter:
        self.start = self._snapshot()
        return self

    def __exit__(self, *_: object) -> None:
        self.end = self._snapshot()

    def per_unit(self, units: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, now in self.end.items():
            before = self.start.get(kind, {})
            out[kind] = sum(max(0.0, ms - before.get(pid, 0.0)) for pid, ms in now.items()) / units
        out["total"] = sum(out.values())
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


# --------------------------------------------------------------------------- API subprocess


@contextlib.contextmanager
def api_server(bench: Bench) -> Iterator[str | None]:
    """Start ``uvicorn api.app:app``; yields its base URL, or ``None`` (reason in ``bench.skipped``)."""
    import importlib.util

    if importlib.util.find_spec("api.app") is None:
        bench.skipped["throughput.http"] = "api.app is not importable"
        yield None
        return
    port = free_port()
    log_path = bench.services.out_dir / "logs" / "api.log"
    cmd = [
        sys.executable, "-m", "uvicorn", "api.app:app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    proc = spawn(cmd, env=bench.services.child_env(), log_path=log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    ready = True
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        if not ready:
            tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
            why = f"exited with {proc.returncode}" if proc.poll() is not None else "not ready in 60 s"
            bench.skipped["throughput.http"] = f"uvicorn api.app:app {why}: {tail.strip()[-600:]}"
            yield None
            return
        bench.api_pid = proc.pid
        yield base
    finally:
        bench.api_pid = None
        stop_process(proc, grace_s=10)


class LeanHttpClient:
    """The HTTP variant's client: one keep-alive ``http.client`` connection per producer thread, JSON
    bodies. The client runs on the same two cores as the API, the workers and PostgreSQL, so its own CPU
    is part of the figure: httpx spent 0.8-1.0 ms of it per request, this 0.2-0.26 ms (measured against
    /healthz on this machine). A connection the server closed is opened again once, for that request."""

    def __init__(self, base_url: str, *, token: str) -> None:
        import urllib.parse

        parsed = urllib.parse.urlsplit(base_url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.local = threading.local()
        self.opened: list[Any] = []

    def _connection(self) -> Any:
        import http.client

        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.opened.append(conn)
        return conn

    def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        import http.client
        import json

        data = json.dumps(body).encode()
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request("POST", path, body=data, headers=self.headers)
                response = conn.getresponse()
                return response.status, response.read().decode(errors="replace")
            except (http.client.RemoteDisconnected, ConnectionError, http.client.CannotSendRequest):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conn in self.opened:
            conn.close()


# --------------------------------------------------------------------------- py-spy (optional)


def start_py_spy(bench: Bench, label: str) -> list[Any]:
    """Sample every worker pool child (and this process) with py-spy while a case runs (only threads holding
    the GIL: Python CPU, not waits); collapsed stacks
    land in the run's log folder. Only with ``--py-spy`` (py-spy is not a dependency)."""
    import shutil

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        log("    --py-spy: py-spy is not installed (pip install py-spy); not profiling")
        return []
    pids = [("producer", os.getpid())] + ([("api", bench.api_pid)] if bench.api_pid else [])
    for worker in bench.services.workers:
        pids += [(f"{worker.name}-child{i}", pid) for i, pid in enumerate(worker.pool_children())]
    spies = []
    for name, pid in pids:
        out = bench.services.out_dir / "profiles" / f"{label}-{name}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [exe, "record", "-p", str(pid), "-f", "raw", "-r", "200", "--nonblocking", "--gil", "-o", str(out)]
        spies.append(spawn(cmd, env=dict(os.environ), log_path=out.with_suffix(".log")))
    log(f"    py-spy sampling {len(spies)} processes into {bench.services.out_dir.name}/profiles/")
    return spies


def stop_py_spy(spies: list[Any]) -> None:
    import signal

    for proc in spies:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in spies:
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)  # py-spy writes its output on SIGINT
        stop_process(proc, grace_s=5)


# --------------------------------------------------------------------------- 1. throughput


def run_baseline_throughput(bench: Bench, n: int) -> float:
    ids = bench.rows(n)
    producers = Producers(ids, send_fn(CAS), bench.args.threads)
    t0 = producers.start()
    t1 = wait_count(
        lambda: seed.count_done_rows(ids[0], ids[-1]),
        n,
        timeout=max(300, n / 2),
        what="baseline CAS rows done",
        services=bench.services,
    )
    producers.join()
    rate = n / (t1 - t0)
    bench.record(
        "throughput",
        {
            "variant": "baseline",
            "n": n,
            "seconds": t1 - t0,
            "per_s": rate,
            "errors": producers.errors[:5],
            "load": loadavg(),
        },
    )
    return rate


def run_parkway_throughput(bench: Bench, n: int, *, http_base: str | None) -> tuple[float, float]:
    parked, seconds = seed.timed(park_many, bench, n)
    log(f"    seeded {n} parked steps in {seconds:.1f}s")
    before = seed.count_consumed_resumes()
    if http_base is None:
        fn = answer_fn(seed.HUMAN)
        variant = "python"
        client = None
    else:
        client = LeanHttpClient(http_base, token=bench.http_token)

        def fn(p: seed.Parked) -> Any:
            assert client is not None
            body = {"response_id": uuid.uuid4().hex, "value": "yes"}
            status, text_ = client.post_json(f"/v1/interactions/{p.interaction_id}/answer", body)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {text_[:200]}")

        variant = "http"
    threads = bench.args.http_clients if http_base else bench.args.threads
    producers = Producers(parked, fn, threads)
    spies = start_py_spy(bench, f"throughput-{variant}") if bench.args.py_spy else []
    try:
        t0 = producers.start()
        t1 = wait_drained(
            bench,
            lambda: not any(t.is_alive() for t in producers.threads),
            timeout=max(300, n / 2),
            what=f"parkway ({variant}) continuations",
        )
        producers.join()
        check_consumed(before, n - len(producers.errors), f"parkway ({variant})")
    finally:
        stop_py_spy(spies)
        if client is not None:
            client.close()
    if producers.errors:
        log(f"    {len(producers.errors)} answers failed, e.g. {producers.errors[0]}")
    done = n - len(producers.errors)
    rate = done / (t1 - t0)
    answer_rate = n / (producers.finished - t0)
    bench.record(
        "throughput",
        {
            "variant": variant,
            "n": n,
            "seconds": t1 - t0,
            "per_s": rate,
            "producer_seconds": producers.finished - t0,
            "answers_per_s": answer_rate,
            "errors": producers.errors[:5],
            "error_count": len(producers.errors),
            "load": loadavg(),
        },
    )
    return rate, answer_rate


VARIANT_LABELS = {
    "baseline": "bare CAS task",
    "consume": "Parkway consume only",
    "python": "Parkway answer→consume (Python)",
    "http": "Parkway answer→consume (HTTP)",
}


def run_consume_throughput(bench: Bench, n: int) -> float:
    """The worker side alone: N steps put in the answered state in bulk (the rows store.answer commits),
    then their resume tasks published as fast as the baseline's, from the same producer threads."""
    from tasks.publish import publish

    parked = seed.bulk_parked(n)
    ids = seed.bulk_answer(parked)
    before = seed.count_consumed_resumes()
    producers = Producers(ids, lambda cid: publish([(cid, "resume")]), bench.args.threads)
    t0 = producers.start()
    t1 = wait_drained(
        bench,
        lambda: not any(t.is_alive() for t in producers.threads),
        timeout=max(300, n / 2),
        what="parkway (consume only) continuations",
    )
    producers.join()
    check_consumed(before, n, "parkway (consume only)")
    rate = n / (t1 - t0)
    bench.record(
        "throughput",
        {"variant": "consume", "n": n, "seconds": t1 - t0, "per_s": rate, "load": loadavg()},
    )
    return rate


def case_throughput(bench: Bench) -> None:
    args = bench.args
    n = args.n
    log(f"== throughput: N={n}, {args.reps} reps, producer threads={args.threads}, workers -c 2")
    base_m = bench.metric("throughput", "bare Celery CAS task", "/s")
    py_m = bench.metric("throughput", "Parkway answer→consume (Python)", "/s")
    py_r = bench.metric("throughput", "ratio Parkway(Python) ÷ baseline", "x", ">= 0.5")
    py_a = bench.metric("throughput", "producer answers/s (Python)", "/s")
    with api_server(bench) if args.http else contextlib.nullcontext() as base_url:
        if args.http and base_url is None:
            log(f"    HTTP variant skipped: {bench.skipped.get('throughput.http')}")
        elif not args.http:
            bench.skipped["throughput.http"] = "disabled with --no-http"
        for rep in range(args.reps):
            log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
            # Each Parkway variant close in time to its baseline (python right beside it), the order
            # reversed every other rep, so the shared machine's slow spells fall on both sides of a ratio.
            order = ["baseline", "python", "http", "consume"]
            if rep % 2:
                order.reverse()
            rates: dict[str, float] = {}
            cpus: dict[str, dict[str, float]] = {}
            for variant in order:
                if variant == "http" and base_url is None:
                    continue
                with CpuMeter(bench) as meter:
                    if variant == "baseline":
                        rates[variant] = run_baseline_throughput(bench, n)
                    elif variant == "consume":
                        rates[variant] = run_consume_throughput(bench, n)
                    elif variant == "python":
                        rates[variant], answers = run_parkway_throughput(bench, n, http_base=None)
                        py_a.add(answers)
                    else:
                        rates[variant], answers = run_parkway_throughput(bench, n, http_base=base_url)
                        bench.metric("throughput", "producer answers/s (HTTP)", "/s").add(answers)
                cpus[variant] = meter.per_unit(n)
                record_cpu(bench, VARIANT_LABELS[variant], cpus[variant])
                bench.record("cpu", {"variant": variant, "rep": rep, **cpus[variant]})
                c = cpus[variant]
                log(
                    f"    {variant:8}: {rates[variant]:7.0f} /s; CPU per unit {c['total']:.1f} ms "
                    f"(workers {c['workers']:.1f}, postgres {c['postgres']:.1f}, producer {c['producer']:.1f}"
                    + (f", api {c['api']:.1f})" if c.get("api") else ")")
                )
            for variant in ("consume", "python", "http"):
                if variant in cpus:
                    bench.metric("cpu", f"ratio CPU per unit {VARIANT_LABELS[variant]} ÷ baseline", "x").add(
                        ratio(cpus[variant]["total"], cpus["baseline"]["total"])
                    )
            base_m.add(rates["baseline"])
            py_m.add(rates["python"])
            py_r.add(ratio(rates["python"], rates["baseline"]))
            bench.metric("throughput", "Parkway consume only (answered in bulk, published)", "/s").add(rates["consume"])
            bench.metric("throughput", "ratio Parkway(consume only) ÷ baseline", "x").add(
                ratio(rates["consume"], rates["baseline"])
            )
            if "http" in rates:
                bench.metric("throughput", "Parkway answer→consume (HTTP)", "/s").add(rates["http"])
                bench.metric("throughput", "ratio Parkway(HTTP) ÷ baseline", "x", ">= 0.5").add(
                    ratio(rates["http"], rates["baseline"])
                )


# --------------------------------------------------------------------------- 4. memory


def worker_memory(bench: Bench) -> dict[str, Any]:
    out: dict[str, Any] = {"workers": []}
    for worker in bench.services.workers:
        children = {pid: proc_memory(pid) for pid in worker.pool_children()}
        out["workers"].append({"main_pid": worker.proc.pid, "main": proc_memory(worker.proc.pid), "children": children})
    return out


def case_memory(bench: Bench, when: str) -> None:
    snapshot = worker_memory(bench)
    bench.record("memory", {"when": when, **snapshot})
    peaks = [m.get("VmHWM", 0.0) for w in snapshot["workers"] for m in w["children"].values()]
    mains = [w["main"].get("VmHWM", 0.0) for w in snapshot["workers"]]
    if when == "after throughput":
        bench.metric("memory", "worker child peak RSS (VmHWM, max of pool)", "MB", "<= 150").add(
            max(peaks, default=None)
        )
        bench.metric("memory", "worker main process peak RSS", "MB").add(max(mains, default=None))
    else:
        bench.metric("memory", f"worker child peak RSS {when}", "MB").add(max(peaks, default=None))
    log(f"== memory {when}: pool children VmHWM {[round(p, 1) for p in peaks]} MB, main {mains} MB")


# --------------------------------------------------------------------------- 2. latency


_tl = threading.local()


def _producer_commit(session: Session) -> None:
    if getattr(_tl, "armed", False):
        _tl.commit = time.time()


def paced(items: Sequence[Any], rate: float, fn: Callable[[Any], Any], threads: int) -> float:
    """Call ``fn`` at a steady ``rate`` per second, open loop: each call is submitted on its slot to a
    pool of ``threads`` (a slow call does not delay the next one). Returns the achieved rate, from the
    calls' actual start times."""
    from concurrent.futures import ThreadPoolExecutor

    starts: list[float] = []

    def call(item: Any) -> Any:
        starts.append(time.time())
        return fn(item)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        t0 = time.time() + 0.1
        futures = []
        for index, item in enumerate(items):
            delay = t0 + index / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(call, item))
        for future in futures:
            future.result()
    span = max(starts) - min(starts)
    return (len(starts) - 1) / span if span > 0 else math.nan


def read_commits(bench: Bench, prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for raw in bench.services.redis().lrange(COMMIT_KEY, 0, -1):
        tag, _, at = raw.decode().partition(" ")
        kind, _, key = tag.partition(":")
        if kind == prefix:
            out[key] = float(at)
    return out


def latency_baseline(bench: Bench, count: int, rate: float) -> dict[str, list[float]]:
    bench.services.redis().delete(COMMIT_KEY)
    ids = bench.rows(count)
    sent: dict[int, float] = {}

    def send(row_id: int) -> None:
        sent[row_id] = time.time()
        app.send_task(CAS_LAT, args=[row_id], queue=QUEUE)

    achieved = paced(ids, rate, send, bench.args.threads)
    wait_count(
        lambda: len(read_commits(bench, "b")) if seed.count_done_rows(ids[0], ids[-1]) >= count else 0,
        count,
        timeout=max(120, count / 5),
        what="baseline latency tasks",
        services=bench.services,
        poll=0.1,
    )
    commits = read_commits(bench, "b")
    with transaction() as session:
        started = dict(
            session.execute(
                text("SELECT id, started FROM bench_rows WHERE id BETWEEN :a AND :b"),
                {"a": ids[0], "b": ids[-1]},
            ).all()
        )
    to_start = [(started[i] - sent[i]) * 1000 for i in ids]
    to_commit = [(commits[str(i)] - sent[i]) * 1000 for i in ids]
    return {"to_start": to_start, "to_commit": to_commit, "achieved_rate": [achieved]}


def latency_parkway(bench: Bench, count: int, rate: float) -> dict[str, list[float]]:
    from tasks import sdk

    bench.services.redis().delete(COMMIT_KEY)
    parked, seconds = seed.timed(park_many, bench, count, snapshot={"lat": True})
    log(f"    seeded {count} parked steps in {seconds:.1f}s")
    committed: dict[str, float] = {}
    returned: dict[str, float] = {}
    call_ms: list[float] = []

    def answer(p: seed.Parked) -> None:
        _tl.armed, _tl.commit = True, None
        called = time.time()
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
        returned[p.step_id] = time.time()
        _tl.armed = False
        committed[p.step_id] = _tl.commit if _tl.commit is not None else returned[p.step_id]
        call_ms.append((returned[p.step_id] - called) * 1000)

    event.listen(Session, "after_commit", _producer_commit)
    try:
        achieved = paced(parked, rate, answer, bench.args.threads)
    finally:
        event.remove(Session, "after_commit", _producer_commit)
    step_ids = [p.step_id for p in parked]
    wait_count(
        lambda: len(read_commits(bench, "p")),
        count,
        timeout=max(120, count / 5),
        what="parkway latency continuations",
        services=bench.services,
        poll=0.1,
    )
    commits, started = read_commits(bench, "p"), read_commits(bench, "s")
    return {
        "to_start": [(started[s] - committed[s]) * 1000 for s in step_ids],
        "to_commit": [(commits[s] - committed[s]) * 1000 for s in step_ids],
        "return_to_start": [(started[s] - returned[s]) * 1000 for s in step_ids],
        "answer_call": call_ms,
        "achieved_rate": [achieved],
    }


def slowest_early(samples: list[float], rate: float) -> float:
    """The share of the slowest 1 % of ``samples`` (in send order) that were sent in the first second:
    a p99 made by warm-up shows as a share near 1."""
    k = max(1, len(samples) // 100)
    slowest = sorted(range(len(samples)), key=lambda i: samples[i])[-k:]
    return sum(1 for i in slowest if i < rate) / k


def case_latency(bench: Bench, rate: float | None = None) -> None:
    """Open-loop answers at ``rate``/s (default ``--latency-rate``, 100) for ``--latency-seconds``.

    Called a second time, below capacity, when Parkway's measured throughput is under twice the rate:
    above capacity the figures measure the queue, not the pipeline."""
    args = bench.args
    main = rate is None
    rate = args.latency_rate if rate is None else rate
    seconds = args.latency_seconds
    count = int(rate * seconds)
    at = "" if main else f" @{rate:.0f}/s"
    log(f"== latency{at}: {rate:g}/s for {seconds:g}s ({count} answers), {args.reps} reps")
    case = "latency" if main else f"latency{at}"
    m = {
        "b50": bench.metric(case, "baseline enqueue→start p50", "ms"),
        "b99": bench.metric(case, "baseline enqueue→start p99", "ms"),
        "p50": bench.metric(case, "Parkway answer commit→continuation start p50", "ms"),
        "p99": bench.metric(case, "Parkway answer commit→continuation start p99", "ms"),
        "r50": bench.metric(case, "ratio start p50 Parkway ÷ baseline", "x", "<= 2" if main else None),
        "r99": bench.metric(case, "ratio start p99 Parkway ÷ baseline", "x", "<= 3" if main else None),
        "bc50": bench.metric(case, "baseline enqueue→committed p50", "ms"),
        "bc99": bench.metric(case, "baseline enqueue→committed p99", "ms"),
        "c50": bench.metric(case, "Parkway answer commit→continuation committed p50", "ms"),
        "c99": bench.metric(case, "Parkway answer commit→continuation committed p99", "ms"),
        "call": bench.metric(case, "tasks.sdk.answer call duration p50", "ms"),
        "rate": bench.metric(case, "Parkway achieved answer rate", "/s"),
    }
    for rep in range(args.reps):
        log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
        results: dict[str, dict[str, list[float]]] = {}
        for variant in ("baseline", "parkway") if rep % 2 == 0 else ("parkway", "baseline"):
            if variant == "baseline":
                results[variant] = latency_baseline(bench, count, rate)
            else:
                results[variant] = latency_parkway(bench, count, rate)
            r = results[variant]
            log(
                f"    {variant:8}: →start p50 {percentile(r['to_start'], 50):6.2f} ms "
                f"p99 {percentile(r['to_start'], 99):6.2f} ms; →committed p50 "
                f"{percentile(r['to_commit'], 50):6.2f} ms p99 {percentile(r['to_commit'], 99):6.2f} ms "
                f"(rate {r['achieved_rate'][0]:.1f}/s); slowest 1% in the window's first second: "
                f"{slowest_early(r['to_start'], rate):.0%}"
            )
        b, p = results["baseline"], results["parkway"]
        b50, b99 = percentile(b["to_start"], 50), percentile(b["to_start"], 99)
        p50, p99 = percentile(p["to_start"], 50), percentile(p["to_start"], 99)
        m["b50"].add(b50)
        m["b99"].add(b99)
        m["p50"].add(p50)
        m["p99"].add(p99)
        m["r50"].add(ratio(p50, b50))
        m["r99"].add(ratio(p99, b99))
        m["bc50"].add(percentile(b["to_commit"], 50))
        m["bc99"].add(percentile(b["to_commit"], 99))
        m["c50"].add(percentile(p["to_commit"], 50))
        m["c99"].add(percentile(p["to_commit"], 99))
        m["call"].add(percentile(p["answer_call"], 50))
        m["rate"].add(p["achieved_rate"][0])
        bench.record(
            case,
            {
                variant: {
                    key: (
                        {f"p{q}": percentile(vals, q) for q in (50, 90, 99)} | {"max": max(vals)}
                        if key != "achieved_rate"
                        else vals[0]
                    )
                    for key, vals in res.items()
                }
                for variant, res in results.items()
            }
            | {"load": loadavg()},
        )


# --------------------------------------------------------------------------- 3a. recovery


class SweepLoop:
    """The beat's job, in-process: ``run_sweep()`` every ``interval`` seconds until stopped."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.stop = threading.Event()
        self.reports: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._loop, name="bench-sweep", daemon=True)

    def _loop(self) -> None:
        from beat.sweep import run_sweep, should_chain

        chained = sent = 0
        while not self.stop.is_set():
            try:
                report = run_sweep()
                self.reports.append(report.as_dict())
                # As ``sweep_task`` does: a full pass over an unbacklogged queue runs the next one at once.
                if should_chain(report, chained, sent):
                    chained, sent = chained + 1, sent + report.published
                else:
                    chained = sent = 0
            except Exception as exc:
                if not any("error" in r for r in self.reports):
                    log(f"    sweep pass failed: {type(exc).__name__}: {exc}")
                self.reports.append({"error": f"{type(exc).__name__}: {exc}"})
                chained = sent = 0
            if not chained:
                self.stop.wait(self.interval)

    def __enter__(self) -> SweepLoop:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def recovery_phase(bench: Bench, n: int, *, lost: bool) -> dict[str, Any]:
    services = bench.services
    services.stop_workers()
    services.flush_broker()
    parked, seconds = seed.timed(park_many, bench, n)
    log(f"    seeded {n} parked steps in {seconds:.1f}s; answering them with the workers stopped")
    before = seed.count_consumed_resumes()
    errors: list[str] = []
    if bench.args.seed == "bulk":
        # The rows store.answer commits, written in bulk, then published as its after-commit step does.
        from tasks.publish import publish

        publish([(cid, "resume") for cid in seed.bulk_answer(parked)])
    else:
        producers = Producers(parked, answer_fn(seed.HUMAN), bench.args.threads)
        producers.start()
        producers.join()
        errors = producers.errors
    answered_at = time.time()
    queued = services.redis().llen(QUEUE)
    if lost:
        services.flush_broker()
        log(f"    answered {n} ({queued} messages queued) and FLUSHDB: every message is lost")
    else:
        log(f"    answered {n} ({queued} messages queued)")
    interval = get_settings().sweep_interval_s
    spawned = time.time()
    services.start_worker()
    t0 = time.time()
    with SweepLoop(interval) as sweeps:
        t1 = wait_drained(
            bench,
            lambda: True,
            timeout=max(900, n / 2),
            what=f"recovery ({'lost' if lost else 'undisturbed'})",
        )
    check_consumed(before, n - len(errors), f"recovery ({'lost' if lost else 'undisturbed'})")
    step_ids = [p.step_id for p in parked]
    with transaction() as session:
        publishes = session.execute(
            text("SELECT coalesce(sum(publishes), 0) FROM continuations WHERE kind='resume' AND step_id = ANY(:s)"),
            {"s": step_ids},
        ).scalar_one()
    republished = sum(r.get("republished", 0) for r in sweeps.reports)
    out = {
        "lost": lost,
        "n": n,
        "seconds_from_ready": t1 - t0,
        "seconds_from_spawn": t1 - spawned,
        "worker_start_s": t0 - spawned,
        "since_last_answer_s": t1 - answered_at,
        "sweep_passes": len(sweeps.reports),
        "sweep_republished": republished,
        "publishes_total": int(publishes),
        "errors": errors[:5],
        "load": loadavg(),
    }
    bench.record("recovery", out)
    return out


def case_recovery(bench: Bench) -> None:
    args = bench.args
    n = args.recovery_n
    s = get_settings()
    log(
        f"== recovery: {n} continuations, {args.recovery_reps} reps; sweep every {s.sweep_interval_s:g}s, "
        f"batch {s.sweep_batch}, re-enqueue after {s.reenqueue_after_s:g}s"
    )
    und = bench.metric("recovery", f"{n} answered, messages kept: until all consumed", "s")
    lost = bench.metric("recovery", f"{n} answered, broker flushed: until all consumed", "s")
    rat = bench.metric("recovery", "ratio lost ÷ undisturbed", "x", "<= 2")
    for rep in range(args.recovery_reps):
        log(f"  rep {rep + 1}/{args.recovery_reps} (load {loadavg()})")
        times: dict[bool, float] = {}
        publishes: dict[bool, int] = {}
        for is_lost in (False, True) if rep % 2 == 0 else (True, False):
            result = recovery_phase(bench, n, lost=is_lost)
            times[is_lost] = result["seconds_from_ready"]
            publishes[is_lost] = result["publishes_total"]
            log(
                f"    {'lost' if is_lost else 'undisturbed':11}: {result['seconds_from_ready']:.1f}s from worker "
                f"ready ({result['sweep_passes']} sweep passes, {result['sweep_republished']} republished)"
            )
        und.add(times[False])
        lost.add(times[True])
        rat.add(ratio(times[True], times[False]))
        for is_lost, label in ((False, "messages kept"), (True, "broker flushed")):
            bench.metric("recovery", f"messages published per continuation, {label}", "x").add(publishes[is_lost] / n)
    bench.services.stop_workers()
    bench.services.flush_broker()


# --------------------------------------------------------------------------- 3b. sweep pass cost


@contextlib.contextmanager
def timed_publish() -> Iterator[dict[str, float]]:
    """Time what the sweep spends in ``publish`` (it imported the name, so wrap it there)."""
    import beat.sweep

    original = beat.sweep.publish
    out = {"ms": 0.0, "messages": 0}

    def publish(items: Any, *args: Any, **kwargs: Any) -> int:
        items = list(items)
        started = time.perf_counter()
        try:
            return original(items, *args, **kwargs)
        finally:
            out["ms"] += (time.perf_counter() - started) * 1000
            out["messages"] += len(items)

    beat.sweep.publish = publish
    try:
        yield out
    finally:
        beat.sweep.publish = original


def use_database(url: str) -> None:
    os.environ["PARKWAY_DATABASE_URL"] = url
    reset_settings()
    reset_engine()


EMPTY_PASSES_PER_REP = 5


def case_sweep(bench: Bench, sweep_url: str) -> None:
    """One pass with ``size`` terminal runs (4 rows each) plus a batch of due rows, per size."""
    from beat.sweep import run_sweep
    from parkway.db import get_engine

    args = bench.args
    sizes = sorted(args.sweep_sizes)
    due = args.sweep_due
    log(f"== sweep: terminal runs {sizes} (each with a step, an interaction, a continuation), due 3 x {due}")
    bench.services.stop_workers()
    main_url = os.environ["PARKWAY_DATABASE_URL"]
    use_database(sweep_url)
    try:
        seed.setup_actors()
        owner = seed.principal_id(seed.AGENT)
        engine = get_engine()
        with engine.begin() as conn:
            ranges = seed.bulk_due(conn, owner, first=1, count=due)
        loaded = 0
        first = 10 * due + 1
        per_size: dict[int, dict[str, list[float]]] = {}
        for size in sizes:
            started = time.perf_counter()
            step = 200_000
            while loaded < size:
                chunk = min(step, size - loaded)
                with engine.begin() as conn:
                    seed.bulk_terminal(conn, owner, first=first + loaded, last=first + loaded + chunk - 1)
                loaded += chunk
                if size >= 10 * step:
                    log(f"    loaded {loaded:,}/{size:,} terminal runs")
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
                # Loading 10^6 runs writes about a gigabyte of WAL: without this, the checkpoint it sets off
                # writes the loaded pages out while the passes are timed (every statement of a pass, and the
                # Redis publishes, ran about twice as slow as at 10^4, the load's aftermath not the sweep's).
                conn.execute(text("CHECKPOINT"))
            log(f"    {size:,} terminal runs loaded and analyzed in {time.perf_counter() - started:.1f}s")
            per_size[size] = {"due": [], "empty": []}
            for rep in range(args.sweep_reps):
                with engine.begin() as conn:
                    seed.reset_due(conn, ranges)
                bench.services.flush_broker()
                with StatementProfile(engine) as due_prof, timed_publish() as published:
                    report = run_sweep()
                per_size[size]["due"].append(report.duration_s)
                with engine.begin() as conn:
                    # A slow pass leaves what it published older than PARKWAY_REENQUEUE_AFTER_S: the next
                    # pass would rightly publish it again. The "nothing due" pass must find nothing.
                    seed.nothing_stale(conn)
                with StatementProfile(engine) as empty_prof:
                    empty = run_sweep()
                per_size[size]["empty"].append(empty.duration_s)
                # A pass with nothing due takes ~10 ms and moves by half of that from one pass to the next
                # on this host: more samples of it (cheap) so its ratio measures the size, not the noise.
                for _ in range(EMPTY_PASSES_PER_REP - 1):
                    per_size[size]["empty"].append(run_sweep().duration_s)
                bench.record(
                    "sweep",
                    {
                        "size": size,
                        "rep": rep,
                        "due_pass": report.as_dict() | {"sql": due_prof.counts(), "publish": published},
                        "empty_pass": empty.as_dict() | {"sql": empty_prof.counts()},
                    },
                )
                if rep == 0:
                    c = due_prof.counts()
                    log(
                        f"    due pass: {c['statements']} statements, {c['savepoints']} savepoints, "
                        f"{c['statement_ms']:.0f} ms inside SQL and {published['ms']:.0f} ms publishing "
                        f"{published['messages']} messages, of {report.duration_s * 1000:.0f} ms"
                    )
                if rep == 0:
                    log(f"    pass with due rows: {report.line()}")
                    log(f"    pass with nothing due: {empty.line()}")
            with engine.begin() as conn:
                seed.nothing_stale(conn)
            with StatementProfile(engine) as profile:
                run_sweep()
            bench.services.flush_broker()
            bench.record("sweep", {"size": size, "empty_pass_statements": profile.summary(explain=engine)})
            log(
                f"    size {size:,}: due pass median {statistics.median(per_size[size]['due']) * 1000:.1f} ms, "
                f"empty pass median {statistics.median(per_size[size]['empty']) * 1000:.2f} ms"
            )
        small, large = sizes[0], sizes[-1]
        for kind, label in (("due", f"pass with {3 * due} due rows"), ("empty", "pass with nothing due")):
            ms = bench.metric("sweep", f"{label}, {small:,} terminal runs", "ms")
            ml = bench.metric("sweep", f"{label}, {large:,} terminal runs", "ms")
            for v in per_size[small][kind]:
                ms.add(v * 1000)
            for v in per_size[large][kind]:
                ml.add(v * 1000)
            if large != small:
                # The sizes are loaded one after the other, so there are no paired reps: medians' ratio.
                bench.metric("sweep", f"ratio {label}: {large:,} ÷ {small:,}", "x", "<= 1.5").add(
                    ratio(statistics.median(per_size[large][kind]), statistics.median(per_size[small][kind]))
                )
    finally:
        use_database(main_url)


# --------------------------------------------------------------------------- what one continuation costs


def case_anatomy(bench: Bench, samples: int = 50) -> None:
    """In-process, workers stopped: what one answer, one resume and one baseline CAS send to PostgreSQL,
    and how long each takes without Celery in between (medians over ``samples``)."""
    from bench.workflows import bare_engine, cas
    from parkway.db import engines
    from tasks import sdk
    from tasks.projection import drain_projections
    from tasks.worker import execute

    log(f"== anatomy: {samples} answers, resumes and baseline CASes in-process (workers stopped)")
    bench.services.stop_workers()
    parked = seed.seed_parked(samples)
    both = engines()
    profiles: dict[str, list[dict[str, Any]]] = {"answer": [], "resume": [], "baseline": []}
    # CPU time, not wall time: a statement's wait for PostgreSQL or a commit's WAL flush is not this
    # process's cost (the backends' own CPU is measured by ``anatomy_cpu``)
    cprof = cProfile.Profile(time.process_time) if bench.args.profile else None
    aprof = cProfile.Profile(time.process_time) if bench.args.profile else None
    for p in parked:
        with StatementProfile(*both) as prof:
            started = time.perf_counter()
            if aprof is not None:
                aprof.enable()
            sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
            if aprof is not None:
                aprof.disable()
            ms = (time.perf_counter() - started) * 1000
        profiles["answer"].append({**prof.counts(), "ms": ms})
        with transaction() as session:
            cid = session.execute(
                text("SELECT id FROM continuations WHERE step_id = :s AND kind = 'resume'"), {"s": p.step_id}
            ).scalar_one()
        with StatementProfile(*both) as prof:
            started = time.perf_counter()
            if cprof is not None:
                cprof.enable()
            outcome = execute(cid)
            if cprof is not None:
                cprof.disable()
            ms = (time.perf_counter() - started) * 1000
            drain_projections()  # its statements count; its time is off the task's path
        assert outcome == "committed", outcome
        profiles["resume"].append({**prof.counts(), "ms": ms, "detail": prof.summary(top=30)})
    bare = bare_engine()
    for row_id in bench.rows(samples):
        with StatementProfile(bare) as prof:
            started = time.perf_counter()
            cas.run(row_id)
            ms = (time.perf_counter() - started) * 1000
        profiles["baseline"].append({**prof.counts(), "ms": ms})
    bench.services.flush_broker()
    out: dict[str, Any] = {}
    for kind, items in profiles.items():
        steady = items[len(items) // 5 :]  # skip warm-up
        out[kind] = {
            key: statistics.median([float(i[key]) for i in steady])
            for key in ("statements", "commits", "savepoints", "checkouts", "statement_ms", "ms")
        }
        bench.metric("anatomy", f"{kind}: statements (+BEGIN/COMMIT per tx)", "n").add(out[kind]["statements"])
        bench.metric("anatomy", f"{kind}: transactions", "n").add(out[kind]["commits"])
        bench.metric("anatomy", f"{kind}: pool checkouts", "n").add(out[kind]["checkouts"])
        bench.metric("anatomy", f"{kind}: in-process time", "ms").add(out[kind]["ms"])
        bench.metric("anatomy", f"{kind}: time inside SQL statements", "ms").add(out[kind]["statement_ms"])
        log(
            f"    {kind:8}: {out[kind]['statements']:.0f} statements in {out[kind]['commits']:.0f} transactions, "
            f"{out[kind]['checkouts']:.0f} checkouts, {out[kind]['ms']:.2f} ms "
            f"({out[kind]['statement_ms']:.2f} ms in SQL)"
        )
    out["cpu"] = anatomy_cpu(bench, samples * 6)
    bench.record("anatomy", {"medians": out, "resume_statements": profiles["resume"][-1]["detail"]})
    for what, prof in (("resume", cprof), ("answer", aprof)):
        if prof is not None:
            path = bench.services.out_dir / f"anatomy-{what}.pstats"
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(path)
            listing = io.StringIO()
            pstats.Stats(prof, stream=listing).sort_stats("cumulative").print_stats(40)
            log(f"    {what} profile (cProfile, {samples} calls, cumulative; pstats in {path}):\n{listing.getvalue()}")


def anatomy_cpu(bench: Bench, count: int) -> dict[str, dict[str, float]]:
    """CPU per answer, per resume and per baseline CAS, each done ``count`` times in a row in this process
    (workers stopped): this process's and this database's PostgreSQL backends'. Which side of the
    database a unit's cost is on, without Celery, the broker or another process in the figure."""
    from bench.workflows import cas
    from tasks import sdk
    from tasks.projection import drain_projections
    from tasks.worker import execute

    parked = seed.seed_parked(count)
    meter = CpuMeter(bench)
    out: dict[str, dict[str, float]] = {}

    def wal() -> int:
        with transaction() as session:
            return int(session.execute(text("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")).scalar_one())

    def measure(kind: str, items: Sequence[Any], fn: Callable[[Any], Any]) -> None:
        wal_before = wal()
        with meter:
            for item in items:
                fn(item)
            drain_projections()
        cpu = meter.per_unit(len(items))
        wal_kb = (wal() - wal_before) / len(items) / 1024
        out[kind] = {"client": cpu["producer"], "postgres": cpu["postgres"], "wal_kb": wal_kb}
        bench.metric("anatomy", f"{kind}: client CPU per unit (in process)", "ms").add(cpu["producer"])
        bench.metric("anatomy", f"{kind}: PostgreSQL CPU per unit", "ms").add(cpu["postgres"])
        bench.metric("anatomy", f"{kind}: WAL per unit", "kB").add(wal_kb)
        log(
            f"    {kind:8}: CPU per unit {cpu['producer']:.2f} ms here, {cpu['postgres']:.2f} ms in PostgreSQL; "
            f"{wal_kb:.1f} kB of WAL"
        )

    log(f"    CPU of {count} of each in a row:")
    measure("answer", parked, lambda p: sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex,
                                                   principal=seed.HUMAN))  # fmt: skip
    with transaction() as session:
        cids = [
            session.execute(
                text("SELECT id FROM continuations WHERE step_id = :s AND kind = 'resume'"), {"s": p.step_id}
            ).scalar_one()
            for p in parked
        ]
    measure("resume", cids, execute)
    measure("baseline", bench.rows(count), cas.run)
    bench.services.flush_broker()
    if bench.args.http:
        out.update(answer_cpu_concurrent(bench, count))
    return out


def answer_cpu_concurrent(bench: Bench, count: int) -> dict[str, dict[str, float]]:
    """CPU per answer with workers stopped, made as the throughput case makes them: ``tasks.sdk.answer`` on
    its producer threads, and over HTTP from its clients. The difference is what HTTP costs per answer
    (the API's CPU beyond the Python answer's), without the workers' share of the cores in the figure."""
    from tasks import sdk
    from tasks.projection import drain_projections
    from tasks.worker import execute

    out: dict[str, dict[str, float]] = {}
    meter = CpuMeter(bench)

    def measure(kind: str, fn: Callable[[seed.Parked], Any], threads: int) -> None:
        parked = seed.seed_parked(count)
        producers = Producers(parked, fn, threads)
        with meter:
            producers.start()
            producers.join()
        if producers.errors:
            raise RuntimeError(f"{kind}: {len(producers.errors)} answers failed, e.g. {producers.errors[0]}")
        cpu = meter.per_unit(count)
        out[kind] = cpu
        parts = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items() if v > 0 and k not in ("total", "workers"))
        log(f"    {kind}: CPU per answer {cpu['total']:.2f} ms ({parts})")
        bench.metric("anatomy", f"{kind}: CPU per answer, total", "ms").add(cpu["total"])
        for part in ("producer", "api", "postgres"):
            if cpu[part] > 0:
                bench.metric("anatomy", f"{kind}: CPU per answer, {part}", "ms").add(cpu[part])
        # Their messages are flushed with the broker: run the continuations they made due here, so no
        # later case waits for them.
        bench.services.flush_broker()
        with transaction() as session:
            due = (
                session.execute(text("SELECT id FROM continuations WHERE status = 'ready' AND kind = 'resume'"))
                .scalars()
                .all()
            )
        for cid in due:
            execute(cid)
        drain_projections()

    log(f"    CPU of {count} answers as the throughput case makes them (workers stopped):")
    threads = bench.args.threads
    measure(
        f"answers on {threads} threads",
        lambda p: sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN),
        threads,
    )
    with api_server(bench) as base:
        if base is None:
            return out
        client = LeanHttpClient(base, token=bench.http_token)

        def over_http(p: seed.Parked) -> None:
            status, body = client.post_json(
                f"/v1/interactions/{p.interaction_id}/answer", {"response_id": uuid.uuid4().hex, "value": "yes"}
            )
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {body[:200]}")

        try:
            measure(f"answers over HTTP from {bench.args.http_clients} clients", over_http, bench.args.http_clients)
        finally:
            client.close()
    return out
