"""Parkway beside a bare Celery baseline, for one tree or two (A/B), in one run on one machine.

``python -m bench --ab /work/wt/before`` measures this tree ("after") and that checkout ("before", with
its own ``.venv``) against the same bare baseline (``bench.bare``), their reps alternating: continuation
throughput answered in-process (``tasks.sdk.answer``) and over HTTP, answer → continuation start latency
at a steady rate, CPU per completion per process (worker, answering process, API, PostgreSQL, Redis) and
worker child peak RSS. ``python -m bench`` runs it for this tree alone as its ``bare`` case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import harness
from bench.abtree import Bare, Tree
from bench.harness import ROOT, log, proc_cpu_ms, proc_memory
from bench.stats import percentile

Sample = dict[str, list[float]]


def cpu_by_pid(pids: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    return {kind: {pid: proc_cpu_ms(pid) for pid in group} for kind, group in pids.items()}


class Meter:
    """CPU per process kind over one timed window: the given pids, the database's backends, Redis (the
    bench's private one). A backend that ends inside the window loses its share: they live as long as
    their pools, so that is rare."""

    def __init__(self, pids: dict[str, list[int]], db_name: str) -> None:
        self.pids, self.db_name = dict(pids), db_name
        self.pids["redis"] = [pid for pid in [harness.private_redis_pid()] if pid]

    def backends(self) -> list[int]:
        with psycopg.connect(harness.database_url("postgres").replace("+psycopg", ""), autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.db_name,)).fetchall()
        return [int(r[0]) for r in rows]

    def __enter__(self) -> Meter:
        self.before = cpu_by_pid({**self.pids, "postgresql": self.backends()})
        return self

    def __exit__(self, *_: object) -> None:
        self.after = cpu_by_pid(
            {**self.pids, "postgresql": sorted(set(self.backends()) | set(self.before["postgresql"]))}
        )

    def per_unit(self, units: int) -> dict[str, float]:
        out = {
            kind: sum(max(0.0, ms - self.before[kind].get(pid, 0.0)) for pid, ms in now.items()) / max(units, 1)
            for kind, now in self.after.items()
        }
        out["total"] = sum(out.values())
        return out


def add(sample: Sample, key: str, value: float | None) -> None:
    if value is not None:
        sample.setdefault(key, []).append(value)


# --------------------------------------------------------------------------- the bare baseline


class BareRunner:
    def __init__(self, bare: Bare) -> None:
        from bench import bare as app

        self.app, self.bare, self.next_id = app, bare, 1
        self.conn = psycopg.connect(os.environ["BENCH_BARE_DATABASE_URL"], autocommit=True)

    def rows(self, n: int) -> list[int]:
        first, self.next_id = self.next_id, self.next_id + n
        self.conn.execute(
            "INSERT INTO bare_rows (id, status) SELECT g, 'queued' FROM generate_series(%s::bigint, %s::bigint) g",
            (first, first + n - 1),
        )
        return list(range(first, first + n))

    def done(self, ids: list[int]) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM bare_rows WHERE id BETWEEN %s AND %s AND status = 'done'", (ids[0], ids[-1])
        ).fetchone()
        return int(row[0]) if row else 0

    def throughput(self, n: int, threads: int) -> tuple[float, dict[str, float]]:
        ids = self.rows(n)
        send = self.app.app.send_task
        with Meter(self.bare.pids(), self.bare.db_name) as meter:
            t0 = time.time()
            pool = [
                threading.Thread(
                    target=lambda c: [send(self.app.CAS, args=[i], queue=self.app.QUEUE) for i in c],
                    args=(ids[k::threads],),
                )
                for k in range(threads)
            ]
            for thread in pool:
                thread.start()
            while self.done(ids) < n:
                time.sleep(0.01)
            t1 = time.time()
            for thread in pool:
                thread.join()
        return n / (t1 - t0), meter.per_unit(n)

    def latency(self, rate: float, count: int) -> list[float]:
        ids = self.rows(count)
        sent: dict[int, float] = {}
        t0 = time.time()
        for k, row_id in enumerate(ids):
            if (wait := t0 + k / rate - time.time()) > 0:
                time.sleep(wait)
            self.app.app.send_task(self.app.CAS_LAT, args=[row_id], queue=self.app.QUEUE)
            sent[row_id] = time.time()
        deadline = time.monotonic() + 120
        while self.done(ids) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = self.conn.execute(
            "SELECT id, started FROM bare_rows WHERE id BETWEEN %s AND %s", (ids[0], ids[-1])
        ).fetchall()
        return sorted((float(started) - sent[int(i)]) * 1000 for i, started in rows if started is not None)


# --------------------------------------------------------------------------- one rep


def tree_throughput(tree: Tree, args: argparse.Namespace, out: Sample) -> None:
    for mode in ("python", "http"):
        parked = tree.ask(cmd="park", n=args.n)
        log(f"    {tree.label}: parked {parked['parked']} in {parked['seconds']:.1f}s")
        threads = args.threads if mode == "python" else args.http_clients
        with Meter(tree.pids(), tree.db_name) as meter:
            got = tree.ask(cmd="answer", mode=mode, threads=threads)
        cpu = meter.per_unit(got["n"] - got["error_count"])
        if got["error_count"]:
            log(f"    {tree.label} {mode}: {got['error_count']} answers failed, e.g. {got['errors'][0]}")
        add(out, f"{mode} /s", got["per_s"])
        for kind, ms in cpu.items():
            add(out, f"{mode} CPU {kind} ms", ms)
        log(f"    {tree.label} {mode:6}: {got['per_s']:6.0f} /s, CPU {cpu['total']:.2f} ms per completion")


def tree_latency(tree: Tree, rate: float, args: argparse.Namespace, out: Sample) -> None:
    tree.ask(cmd="park", n=max(20, int(rate * args.latency_seconds)))
    got = tree.ask(cmd="latency", rate=rate)
    lat = got["latencies_ms"]
    add(out, "latency p50 ms", percentile(lat, 50))
    add(out, "latency p99 ms", percentile(lat, 99))
    log(
        f"    {tree.label} latency at {rate:.0f}/s: p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms "
        f"(n={len(lat)}, answers ended {got['behind_s']:.1f}s behind the pace)"
    )


def bare_throughput(runner: BareRunner, args: argparse.Namespace, out: Sample) -> None:
    rate, cpu = runner.throughput(args.n, args.threads)
    add(out, "bare /s", rate)
    for kind, ms in cpu.items():
        add(out, f"bare CPU {kind} ms", ms)
    log(f"    bare: {rate:6.0f} /s, CPU {cpu['total']:.2f} ms per completion")


def bare_latency(runner: BareRunner, rate: float, args: argparse.Namespace, out: Sample) -> None:
    lat = runner.latency(rate, max(20, int(rate * args.latency_seconds)))
    add(out, "bare latency p50 ms", percentile(lat, 50))
    add(out, "bare latency p99 ms", percentile(lat, 99))
    log(f"    bare latency at {rate:.0f}/s: p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms")


def latency_rate(args: argparse.Namespace, rep: int, base: Sample, samples: dict[str, Sample]) -> float:
    """The asked rate, or half the slowest throughput of this rep when that is lower: above capacity the
    figure would be queueing time, not the path from answer to start."""
    rates = [base["bare /s"][rep], *[s["python /s"][rep] for s in samples.values()]]
    return float(min(args.latency_rate, max(1.0, round(0.5 * min(rates)))))


# --------------------------------------------------------------------------- the report


def med(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def cell(values: list[float] | None, digits: int = 0) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratio_cell(a: list[float] | None, b: list[float] | None) -> str:
    """The ratio of medians, and its range over the reps (each rep's own ratio)."""
    if not a or not b:
        return "-"
    per_rep = [x / y for x, y in zip(a, b, strict=False) if y]
    if not per_rep:
        return "-"
    return cell([statistics.median(a) / statistics.median(b)] if len(per_rep) == 1 else per_rep, 2)


CPU_KINDS = ("total", "worker", "answering", "api", "postgresql", "redis")
VERSUS_BARE = (
    ("in-process answers ÷ bare", "python /s", "bare /s", ">= 0.6"),
    ("HTTP answers ÷ bare", "http /s", "bare /s", ">= 0.45"),
    ("CPU per completion (in-process) ÷ bare's", "python CPU total ms", "bare CPU total ms", "<= 2"),
    ("CPU per completion (HTTP) ÷ bare's", "http CPU total ms", "bare CPU total ms", "-"),
    ("latency p50 ÷ bare enqueue→start p50", "latency p50 ms", "bare latency p50 ms", "<= 1.5"),
    ("latency p99 ÷ bare enqueue→start p99", "latency p99 ms", "bare latency p99 ms", "<= 2"),
)


STEADY = 1.15  # the bare baseline's CPU per completion may move this much across reps on a steady host


def steadiness(bare_cpu: list[float] | None) -> list[str]:
    """A warning when the host's speed moved during the run: the bare baseline runs the same code in every
    rep, so its CPU per completion should not move; when it does, so does every tree's, rep by rep."""
    if not bare_cpu or len(bare_cpu) < 2 or min(bare_cpu) <= 0:
        return []
    spread = max(bare_cpu) / min(bare_cpu)
    if spread <= STEADY:
        return []
    return [
        "",
        f"WARNING: the bare baseline's CPU per completion moved {min(bare_cpu):.2f}-{max(bare_cpu):.2f} ms "
        f"({spread:.2f} x) across the reps: this host's speed changed during the run, and a difference between "
        "the trees smaller than that is not a measurement (compare blocks and WAL: python -m bench.statements).",
    ]


def report(trees: list[Tree], samples: dict[str, Sample], bare: Sample, extra: dict[str, float]) -> str:
    labels = [t.label for t in trees]
    lines = ["", "Parkway beside bare Celery (median (min-max) over reps)", ""]
    head = "| figure | " + " | ".join(labels) + " | target |"
    lines += [head, "|" + "---|" * (len(labels) + 2)]
    for name, key, base, target in VERSUS_BARE:
        lines.append(
            f"| {name} | "
            + " | ".join(ratio_cell(samples[t].get(key), bare.get(base)) for t in labels)
            + f" | {target} |"
        )
    rss = [f"{extra[f'rss {label}']:.0f}" if f"rss {label}" in extra else "-" for label in labels]
    lines.append("| worker child peak RSS (VmHWM), MB | " + " | ".join(rss) + " | <= 120 |")
    for name, value in extra.items():  # the sweep case's ratios, measured on this tree only
        if not name.startswith("rss "):
            lines.append(f"| {name} | {value:.2f} | " + "- | " * (len(labels) - 1) + "<= 1.2 |")
    lines += steadiness(bare.get("bare CPU total ms"))
    lines += [
        "",
        f"Latency runs paced at {cell(bare.get('latency rate /s'))} answers/s (asked rate, or half the slowest ",
    ]
    lines[-1] += "throughput of the rep when lower)."
    lines += ["", "| absolute | bare | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 2)]
    rows: list[tuple[str, str, str | None, int]] = [
        ("completions/s, in-process answers", "python /s", "bare /s", 0),
        ("completions/s, HTTP answers", "http /s", None, 0),
    ]
    rows += [
        ("latency p50, ms", "latency p50 ms", "bare latency p50 ms", 1),
        ("latency p99, ms", "latency p99 ms", "bare latency p99 ms", 1),
    ]
    for mode in ("python", "http"):
        for kind in CPU_KINDS:
            rows.append(
                (
                    f"CPU per completion, {kind} ({mode}), ms",
                    f"{mode} CPU {kind} ms",
                    f"bare CPU {kind} ms" if mode == "python" else None,
                    2,
                )
            )
    for name, key, bare_key, digits in rows:
        lines.append(
            f"| {name} | {cell(bare.get(bare_key) if bare_key else None, digits)} | "
            + " | ".join(cell(samples[t].get(key), digits) for t in labels)
            + " |"
        )
    if len(trees) == 2:
        before, after = labels[1], labels[0]
        lines += ["", f"A/B: {after} ({trees[0].git()}) vs {before} ({trees[1].git()})", ""]
        lines += [f"| figure | {before} | {after} | {after} ÷ {before} |", "|---|---|---|---|"]
        for name, key, digits in (
            ("continuation throughput, Python answers /s", "python /s", 0),
            ("continuation throughput, HTTP answers /s", "http /s", 0),
            ("latency p50 ms", "latency p50 ms", 1),
            ("latency p99 ms", "latency p99 ms", 1),
            ("CPU per completion (Python) ms", "python CPU total ms", 2),
        ):
            a, b = samples[after].get(key), samples[before].get(key)
            lines.append(f"| {name} | {cell(b, digits)} | {cell(a, digits)} | {ratio_cell(a, b)} |")
    return "\n".join(lines)


def measure(paths: list[tuple[str, Path]], args: argparse.Namespace, extra: dict[str, float] | None = None) -> int:
    """Start the bare baseline and every tree, run ``args.reps`` alternating reps, print the tables."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = ROOT / "bench" / "out" / f"ab-{stamp}"
    redis_url = harness.start_private_redis(out_dir)
    trees = [
        Tree(label=label, path=path, index=i + 1, redis_url=redis_url, out_dir=out_dir)
        for i, (label, path) in enumerate(paths)
    ]
    bare = Bare(redis_url=redis_url, out_dir=out_dir)
    samples: dict[str, Sample] = {t.label: {} for t in trees}
    base: Sample = {}
    extra = dict(extra or {})
    load = os.getloadavg()
    try:
        bare.start()
        for tree in trees:
            tree.start()
        runner = BareRunner(bare)
        for rep in range(args.reps):
            order: list[Any] = [bare, *trees]
            if rep % 2:
                order.reverse()
            log(f"  rep {rep + 1}/{args.reps} (load {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
            for who in order:
                if isinstance(who, Bare):
                    bare_throughput(runner, args, base)
                else:
                    tree_throughput(who, args, samples[who.label])
            rate = latency_rate(args, rep, base, samples)
            add(base, "latency rate /s", rate)
            for who in order:
                if isinstance(who, Bare):
                    bare_latency(runner, rate, args, base)
                else:
                    tree_latency(who, rate, args, samples[who.label])
        for tree in trees:
            assert tree.worker is not None
            peaks = [proc_memory(pid).get("VmHWM", 0.0) for pid in tree.worker.pool_children()]
            extra[f"rss {tree.label}"] = max(peaks, default=0.0)
    finally:
        harness.cleanup()
        for name in [bare.db_name, *[t.db_name for t in trees]]:
            harness.drop_database(name)
    text = report(trees, samples, base, extra)
    print(text, flush=True)
    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at end {end}")
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = {"args": vars(args), "load_at_start": load, "bare": base, "trees": samples, "extra": extra}
    (out_dir / "results.json").write_text(json.dumps(raw, indent=2, default=str))
    (out_dir / "results.md").write_text(text + "\n")
    print(f"results: {(out_dir / 'results.md').relative_to(ROOT)}")
    return 0
