"""3b. sweep pass cost: one pass beside a growing number of terminal runs."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import text

from bench import seed
from bench.cases.common import (
    Bench,
    ratio,
)
from bench.harness import (
    log,
)
from bench.sqlprof import StatementProfile
from parkway.db import reset_engine
from parkway.settings import reset_settings


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
