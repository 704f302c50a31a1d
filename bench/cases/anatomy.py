"""What one continuation costs: one answer, one resume and one baseline CAS, in-process."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import text

from bench import seed
from bench.cases.common import (
    Bench,
    CpuMeter,
    Producers,
)
from bench.cases.httpapi import LeanHttpClient, api_server
from bench.harness import (
    log,
)
from bench.sqlprof import StatementProfile
from parkway.db import transaction


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
