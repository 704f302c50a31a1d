"""1. throughput: answer→consume beside a bare Celery CAS task (and py-spy, optional)."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import seed
from bench.cases.common import (
    Bench,
    CpuMeter,
    Producers,
    answer_fn,
    check_consumed,
    loadavg,
    park_many,
    ratio,
    record_cpu,
    send_fn,
    wait_count,
    wait_drained,
)
from bench.cases.httpapi import LeanHttpClient, api_server
from bench.harness import (
    log,
    spawn,
    stop_process,
)
from bench.workflows import CAS, DONE, WHAT_IF

# --------------------------------------------------------------------------- py-spy (optional)


def start_py_spy(bench: Bench, label: str) -> list[Any]:
    """Sample every worker's main process and pool children (and this process) with py-spy while a case runs
    (only threads holding the GIL: Python CPU, not waits); collapsed stacks land in the run's log folder. Only
    with ``--py-spy`` (py-spy is not a dependency)."""
    import shutil

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        log("    --py-spy: py-spy is not installed (pip install py-spy); not profiling")
        return []
    pids = [("producer", os.getpid())] + ([("api", bench.api_pid)] if bench.api_pid else [])
    for worker in bench.services.workers:
        pids += [(f"{worker.name}-main", worker.proc.pid)]
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


def run_parkway_throughput(
    bench: Bench,
    n: int,
    *,
    http_base: str | None,
    continuation: str = DONE,
    label: str | None = None,
    parked: list[seed.Parked] | None = None,
) -> tuple[float, float]:
    """Answers of ``n`` steps parked on ``continuation`` (by the SDK, or over HTTP at ``http_base``) until
    every continuation they made due is consumed: whoever consumes it (the remote case: a Node agent).
    ``parked``: the ``n`` steps, parked beforehand by the caller (else parked here, before the clock starts)."""
    if parked is None:
        parked, seconds = seed.timed(park_many, bench, n, continuation=continuation)
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
    variant = label or variant
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
    "baseline": "CAS task on Parkway's app",
    "consume": "Parkway consume only",
    "python": "Parkway answer→consume (Python)",
    "python-traced": "Parkway answer→consume (Python), workers traced",
    "http": "Parkway answer→consume (HTTP)",
}


TRACED = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "parkway-bench"}


WARM_N = 200  # answer→consume run by freshly started workers before a measure: their first executions' one-offs


@contextlib.contextmanager
def fresh_workers(bench: Bench, *, traced: bool) -> Iterator[Any]:
    """``--what-if tracing``: the answer→consume variant and its traced twin each on workers started for it
    (exporting every span, 100 % sampling, over OTLP/HTTP to a local sink that answers 200 at once:
    bench/receiver.py; or untraced) and warmed by ``WARM_N`` answers, all outside the measure, so the two
    differ by the tracing alone, not by one of them paying a fresh pool child's first executions (its lazy
    imports, statement compiles and prepares). Yields the sink (``None`` untraced)."""
    from bench.cases.webhooks import receiver

    with receiver(bench) if traced else contextlib.nullcontext() as sink:
        if sink is not None:
            bench.services.env.update(TRACED, OTEL_EXPORTER_OTLP_ENDPOINT=sink.url.removesuffix("/hook"))
        bench.services.stop_workers()
        bench.services.start_worker()
        try:
            run_parkway_throughput(bench, WARM_N, http_base=None, label="warm-up")
            if sink is not None:  # the warm-up's spans sent before the measure, none of it in it
                exported(bench, sink, SPANS_PER_RESUME * WARM_N)
            yield sink
        finally:
            for key in TRACED:
                bench.services.env.pop(key, None)
            if traced:
                bench.services.stop_workers()
                bench.services.start_worker()


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


def run_leg(bench: Bench, variant: str, n: int, base_url: str | None) -> tuple[float, dict[str, float]]:
    """One variant over ``n`` units: its seconds and CPU per unit (``--what-if tracing``: the Python
    variants each on workers started and warmed for it, outside the measure)."""
    fresh = "tracing" in WHAT_IF and variant in ("python", "python-traced")
    workers = fresh_workers(bench, traced=variant == "python-traced") if fresh else contextlib.nullcontext()
    with workers as sink:
        with CpuMeter(bench) as meter:
            if variant == "baseline":
                rate = run_baseline_throughput(bench, n)
            elif variant == "consume":
                rate = run_consume_throughput(bench, n)
            else:
                http = variant == "http"
                rate, answers = run_parkway_throughput(bench, n, http_base=base_url if http else None, label=variant)
                if variant != "python-traced":
                    label = "producer answers/s (HTTP)" if http else "producer answers/s (Python)"
                    bench.metric("throughput", label, "/s").add(answers)
            if sink is not None:  # the spans still batched in the workers are exported inside the measure too
                exported(bench, sink, SPANS_PER_RESUME * (WARM_N + n))
        if sink is not None:  # what the leg's workers exported, read before its sink stops
            per_completion(bench, sink, WARM_N + n)
    # Where in the workers the CPU goes: Celery's main process, the bodies' threads, or the others (the
    # projector, a tracing export thread); the baseline's pool children have no other thread.
    split = meter.split(n)
    log(f"    {variant}: workers' CPU per unit by thread: " + ", ".join(f"{k} {v:.2f} ms" for k, v in split.items()))
    for part, ms in split.items():
        bench.metric("cpu", f"{VARIANT_LABELS[variant]}: workers' CPU per unit, {part}", "ms").add(ms)
    return n / rate, meter.per_unit(n)


SPANS_PER_RESUME = 2  # the bench's resume completes: its execution's CONSUMER span and its commit's


def exported(bench: Bench, sink: Any, spans: int) -> None:
    """Wait until the OTLP sink has received ``spans`` (the batch processor sends within its schedule delay)."""
    import urllib.request

    def received() -> int:
        with urllib.request.urlopen(sink.url.replace("/hook", "/spans"), timeout=5) as answer:
            return int(answer.read())

    wait_count(received, spans, timeout=60, what="spans exported", services=bench.services, poll=0.2)


def per_completion(bench: Bench, sink: Any, completions: int) -> None:
    """What the workers exported per completion (warm-up included): spans by name, attributes, links."""
    import json
    import urllib.request

    with urllib.request.urlopen(sink.url.replace("/hook", "/spans/names"), timeout=5) as answer:
        tally = json.loads(answer.read())
    each = {name: round(count / completions, 2) for name, count in sorted(tally.items())}
    log(f"    exported per completion: {each}")
    for name in ("attributes", "links"):
        bench.metric("tracing", f"{name} exported per completion", "x").add(tally.get(name, 0) / completions)
    spans = sum(count for name, count in tally.items() if name not in ("attributes", "links"))
    bench.metric("tracing", "spans exported per completion", "x").add(spans / completions)


def per_unit(legs: list[tuple[int, float, dict[str, float]]]) -> dict[str, float]:
    """CPU per unit over a variant's legs (each ``(units, seconds, CPU per unit)``)."""
    units = sum(size for size, _, _ in legs)
    return {part: sum(size * cpu[part] for size, _, cpu in legs) / units for part in legs[0][2]}


def case_throughput(bench: Bench) -> None:
    args = bench.args
    n = args.n
    log(f"== throughput: N={n}, {args.reps} reps, producer threads={args.threads}, workers -c 2")
    base_m = bench.metric("throughput", "CAS task on Parkway's app (bench.cas)", "/s")
    py_m = bench.metric("throughput", "Parkway answer→consume (Python)", "/s")
    py_r = bench.metric("throughput", "ratio Parkway(Python) ÷ CAS on Parkway's app", "x", ">= 0.5")
    with api_server(bench) if args.http else contextlib.nullcontext() as base_url:
        if args.http and base_url is None:
            log(f"    HTTP variant skipped: {bench.skipped.get('throughput.http')}")
        elif not args.http:
            bench.skipped["throughput.http"] = "disabled with --no-http"
        for rep in range(args.reps):
            log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
            # Each Parkway variant close in time to its baseline (python right beside it), the order
            # reversed every other rep, so the shared machine's slow spells fall on both sides of a ratio.
            # ``--what-if tracing``: untraced and traced each run as two halves of N, in the order
            # A B B A, so a drift of the host within the rep weighs on both alike.
            pair = ["python", "python-traced", "python-traced", "python"] if "tracing" in WHAT_IF else ["python"]
            order = ["baseline", *pair, "http", "consume"]
            if rep % 2:
                order.reverse()
            legs: dict[str, list[tuple[int, float, dict[str, float]]]] = {}
            for variant in order:
                if variant == "http" and base_url is None:
                    continue
                size = n // 2 if len(pair) > 1 and variant in pair else n
                legs.setdefault(variant, []).append((size, *run_leg(bench, variant, size, base_url)))
            rates = {
                variant: sum(size for size, _, _ in done) / sum(s for _, s, _ in done) for variant, done in legs.items()
            }
            cpus = {variant: per_unit(done) for variant, done in legs.items()}
            for variant in legs:
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
                    bench.metric(
                        "cpu", f"ratio CPU per unit {VARIANT_LABELS[variant]} ÷ CAS on Parkway's app", "x"
                    ).add(ratio(cpus[variant]["total"], cpus["baseline"]["total"]))
            if "python-traced" in rates:
                bench.metric("throughput", VARIANT_LABELS["python-traced"], "/s").add(rates["python-traced"])
                bench.metric("throughput", "ratio Parkway(Python) traced ÷ untraced", "x", ">= 0.95").add(
                    ratio(rates["python-traced"], rates["python"])
                )
                # The same ratio as a host bound by CPU would show it: steadier than the rates on a shared machine.
                for part in ("total", "workers"):
                    bench.metric("cpu", f"ratio CPU per unit, {part}: untraced ÷ traced", "x").add(
                        ratio(cpus["python"][part], cpus["python-traced"][part])
                    )
            base_m.add(rates["baseline"])
            py_m.add(rates["python"])
            py_r.add(ratio(rates["python"], rates["baseline"]))
            bench.metric("throughput", "Parkway consume only (answered in bulk, published)", "/s").add(rates["consume"])
            bench.metric("throughput", "ratio Parkway(consume only) ÷ CAS on Parkway's app", "x").add(
                ratio(rates["consume"], rates["baseline"])
            )
            if "http" in rates:
                bench.metric("throughput", "Parkway answer→consume (HTTP)", "/s").add(rates["http"])
                bench.metric("throughput", "ratio Parkway(HTTP) ÷ CAS on Parkway's app", "x", ">= 0.5").add(
                    ratio(rates["http"], rates["baseline"])
                )
