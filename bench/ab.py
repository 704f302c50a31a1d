"""Parkway beside a bare Celery baseline, for one tree or two (A/B), in one run on one machine.

``python -m bench --ab /work/wt/before`` measures this tree ("after") and that checkout ("before", with
its own ``.venv``) against the same bare baseline (``bench.bare``) and durable floor (``bench.floor``),
their reps alternating: continuation throughput answered in-process (``tasks.sdk.answer``) and over HTTP,
answer → continuation start latency at a steady rate, CPU per completion per process (worker, answering
process, API, PostgreSQL, Redis) and worker child peak RSS. ``python -m bench`` runs it for this tree
alone as its ``bare`` case.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import floor, harness
from bench.abtree import Bare, Tree
from bench.harness import ROOT, log, proc_memory
from bench.meter import Meter, Sample, add, cell, ratio_cell
from bench.runners import BareRunner, FloorRunner
from bench.stats import percentile

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


def baseline_throughput(name: str, runner: BareRunner | FloorRunner, args: argparse.Namespace, out: Sample) -> None:
    """One rep of a baseline with none of Parkway (``bare`` or ``floor``), into ``out`` under its name."""
    rate, cpu = runner.throughput(args.n, args.threads)
    add(out, f"{name} /s", rate)
    for kind, ms in cpu.items():
        add(out, f"{name} CPU {kind} ms", ms)
    log(f"    {name}: {rate:6.0f} /s, CPU {cpu['total']:.2f} ms per completion")


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
    lines += floor.report(labels, samples, bare, CPU_KINDS)
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
        runner, floor_runner = BareRunner(bare), FloorRunner(bare)
        for rep in range(args.reps):
            order: list[Any] = [bare, *trees]
            if rep % 2:
                order.reverse()
            log(f"  rep {rep + 1}/{args.reps} (load {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
            for who in order:
                if isinstance(who, Bare):
                    baseline_throughput("bare", runner, args, base)
                    baseline_throughput("floor", floor_runner, args, base)
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
