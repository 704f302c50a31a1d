"""3a. recovery: answered continuations consumed with the broker's messages kept and lost."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text

from bench import seed
from bench.cases.common import (
    Bench,
    Producers,
    answer_fn,
    check_consumed,
    loadavg,
    park_many,
    ratio,
    wait_drained,
)
from bench.harness import (
    log,
)
from bench.workflows import QUEUE
from parkway.db import transaction
from parkway.settings import get_settings


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
