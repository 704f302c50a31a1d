"""2. latency: open-loop answers, answer commit→continuation start beside enqueue→start."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from bench import seed
from bench.cases.common import (
    Bench,
    loadavg,
    park_many,
    ratio,
    wait_count,
)
from bench.harness import (
    log,
)
from bench.stats import percentile
from bench.workflows import CAS_LAT, COMMIT_KEY, QUEUE
from parkway.db import transaction
from tasks.celery_app import app

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
        app.send_task(CAS_LAT, args=[row_id], queue=QUEUE)
        sent[row_id] = time.time()  # once sent, as Parkway's clock starts once the answer has returned

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
        "b50": bench.metric(case, "CAS on Parkway's app: enqueue→start p50", "ms"),
        "b99": bench.metric(case, "CAS on Parkway's app: enqueue→start p99", "ms"),
        "p50": bench.metric(case, "Parkway answer commit→continuation start p50", "ms"),
        "p99": bench.metric(case, "Parkway answer commit→continuation start p99", "ms"),
        "r50": bench.metric(case, "ratio start p50 Parkway ÷ baseline", "x", "<= 2" if main else None),
        "r99": bench.metric(case, "ratio start p99 Parkway ÷ baseline", "x", "<= 3" if main else None),
        "bc50": bench.metric(case, "CAS on Parkway's app: enqueue→committed p50", "ms"),
        "bc99": bench.metric(case, "CAS on Parkway's app: enqueue→committed p99", "ms"),
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
