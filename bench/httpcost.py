"""``python -m bench.httpcost``: what an answer over HTTP costs beyond the same answer made in process.

Workers stopped, as the anatomy case measures answers: ``n`` parked steps (COPY, ``seed.bulk_parked``)
answered by ``tasks.sdk.answer`` on ``--threads`` threads, and ``n`` more over HTTP (``POST
/v1/interactions/{id}/answer``) from ``--http-clients`` keep-alive clients, the two alternating over
``--reps``; CPU per answer of this process (the producer), the API process and the database's backends
(/proc, user + system). The HTTP answer's extra is ``http total - python total``: the API's parsing,
validation, authentication and response on top of the answer the SDK makes. ``--ab TREE`` serves the API
from another checkout too (this interpreter and its packages, that tree's code), and each rep answers
through both servers in turn: the API's CPU of the two trees, paired rep by rep. ``--profile OUT.pstats``
runs the API under ``bench.apiprofile`` (cProfile of every thread, by its CPU clock) instead: where the
API's time goes, its figures slowed by the profiler.

It takes the bench's machine lock and its own database (``parkway_bench_http``, dropped at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import CLK_TCK, log

KINDS = ("producer", "api", "api loop", "api threads", "postgres", "total")


def loop_cpu_ms(pid: int) -> float:
    """CPU the API's main thread (its event loop: HTTP, routing, validation, the response) has used, in ms:
    the rest of the API's is its thread pool's (``api.deps.in_thread``: authentication and the answer)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.httpcost", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000, help="answers per mode per rep (default 1000)")
    p.add_argument("--reps", type=int, default=3, help="repetitions, the modes alternating (default 3)")
    p.add_argument("--threads", type=int, default=4, help="in-process answering threads (default 4)")
    p.add_argument("--http-clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    p.add_argument("--profile", type=Path, help="run the API under bench.apiprofile, pstats written here")
    p.add_argument(
        "--py-spy",
        type=Path,
        help="sample the API (the thread holding the GIL) with py-spy in each HTTP rep: raw stacks in PATH.<rep>",
    )
    p.add_argument("--ab", type=Path, metavar="TREE", help="also serve the API from TREE; compare the two, paired")
    p.add_argument("--db-name", default="parkway_bench_http", help="PostgreSQL database to create (and drop)")
    p.add_argument("--redis-db", type=int, default=14, help="preferred Redis index (default 14)")
    args = p.parse_args(argv)
    args.what_if, args.worker_loglevel = "", "warning"
    return args


def measure(bench: Any, mode: str, base: str) -> dict[str, float]:
    """CPU per answer of ``bench.args.n`` answers made in ``mode`` (``python`` or ``http``)."""
    from bench import seed
    from bench.cases.common import CpuMeter, Producers
    from bench.cases.httpapi import LeanHttpClient
    from tasks import sdk

    args = bench.args
    parked = seed.bulk_parked(args.n)
    client = LeanHttpClient(base, token=bench.http_token)

    def over_http(p: seed.Parked) -> None:
        body = {"response_id": uuid.uuid4().hex, "value": "yes"}
        status, text = client.post_json(f"/v1/interactions/{p.interaction_id}/answer", body)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {text[:200]}")

    def in_process(p: seed.Parked) -> None:
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)

    fn, threads = (over_http, args.http_clients) if mode == "http" else (in_process, args.threads)
    producers = Producers(parked, fn, threads)
    try:
        with CpuMeter(bench) as meter:
            loop_before = loop_cpu_ms(bench.api_pid)
            producers.start()
            producers.join()
            loop = loop_cpu_ms(bench.api_pid) - loop_before
    finally:
        client.close()
    if producers.errors:
        raise RuntimeError(f"{mode}: {len(producers.errors)} answers failed, e.g. {producers.errors[0]}")
    bench.services.flush_broker()  # no worker runs their continuations: they stay ready, unpublished
    cpu = meter.per_unit(args.n)
    cpu["api loop"] = loop / args.n
    cpu["api threads"] = cpu["api"] - cpu["api loop"]
    return {kind: cpu[kind] for kind in KINDS}


@contextlib.contextmanager
def sampled(bench: Any, out: Path | None) -> Iterator[None]:
    """``py-spy record --gil`` of the API process while the block runs (raw collapsed stacks in ``out``)."""
    if out is None or bench.api_pid is None:
        yield
        return
    import shutil
    import signal
    import subprocess
    import sys

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    cmd = [exe, "record", "--gil", "-r", "250", "-f", "raw", "-o", str(out), "-p", str(bench.api_pid)]
    with open(str(out) + ".log", "ab") as log_file:
        spy = subprocess.Popen(cmd, stdout=log_file, stderr=log_file)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        spy.wait(timeout=60)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def run(bench: Any) -> str:
    from bench.cases.httpapi import api_server

    args = bench.args
    modes = ["python", "http", *(["http ab"] if args.ab else [])]
    samples: dict[str, dict[str, list[float]]] = {mode: {} for mode in modes}
    with contextlib.ExitStack() as servers:
        bases = {"http": servers.enter_context(api_server(bench, profile=args.profile))}
        pids = {"http": bench.api_pid}
        if args.ab:
            bases["http ab"] = servers.enter_context(api_server(bench, tree=args.ab.resolve()))
            pids["http ab"] = bench.api_pid
        urls = {mode: url for mode, url in bases.items() if url is not None}
        if len(urls) < len(bases):
            raise RuntimeError(f"the API did not start: {bench.skipped}")
        for mode, url in urls.items():  # warm-up: each API's first requests, the pools' connections
            bench.api_pid = pids[mode]
            measure(bench, "http", url)
        for rep in range(args.reps):
            for mode in modes if rep % 2 == 0 else modes[::-1]:
                bench.api_pid = pids.get(mode, pids["http"])
                spy = Path(f"{args.py_spy}.{rep + 1}") if args.py_spy and mode == "http" else None
                with sampled(bench, spy):
                    cpu = measure(bench, "python" if mode == "python" else "http", urls.get(mode, urls["http"]))
                for kind, ms in cpu.items():
                    samples[mode].setdefault(kind, []).append(ms)
                log(f"  rep {rep + 1} {mode:7}: " + ", ".join(f"{k} {v:.3f}" for k, v in cpu.items()) + " ms")
    extra = [h - p for h, p in zip(samples["http"]["total"], samples["python"]["total"], strict=True)]
    heads = [f"in process ({args.threads} threads)", f"over HTTP ({args.http_clients} clients)"]
    heads += [f"over HTTP, the API from {args.ab}"] if args.ab else []
    lines = [
        f"CPU per answer, ms, median (min-max) of {args.reps} reps of {args.n} answers each, workers stopped",
        "",
        "| process | " + " | ".join(heads) + " |",
        "|---" * (len(heads) + 1) + "|",
    ]
    lines += [f"| {kind} | " + " | ".join(cell(samples[m][kind]) for m in modes) + " |" for kind in KINDS]
    lines += ["", f"HTTP's extra CPU per answer (http total - python total, per rep): {cell(extra)} ms"]
    if args.ab:
        for kind in ("api", "api loop", "api threads"):
            ratios = [a / b for a, b in zip(samples["http"][kind], samples["http ab"][kind], strict=True) if b]
            lines.append(f"{kind}, this tree / {args.ab.name}'s, per rep: {cell(ratios) if ratios else '-'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.run import OUT, prepare_environment, take_the_machine

    args = parse_args(argv)
    if not take_the_machine("bench.httpcost"):
        return 2
    out_dir = OUT / f"httpcost-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    index = harness.claim_redis_db(args.redis_db)
    services = prepare_environment(args, f"{harness.REDIS_HOST_URL}/{index}", out_dir)
    try:
        harness.create_database(args.db_name)
        from parkway.db import get_engine
        from parkway.migrate import upgrade

        upgrade(get_engine())
        from bench import seed
        from bench.cases.common import Bench

        services.flush_broker()
        bench = Bench(args=args, services=services, http_token=seed.setup_actors())
        print(run(bench), flush=True)
    finally:
        harness.cleanup()
        services.flush_broker()
        from parkway.db import reset_engine

        reset_engine()
        harness.drop_database(args.db_name)
    if args.profile is not None:
        log(f"API profile (pstats): {args.profile}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
