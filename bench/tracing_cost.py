"""What Parkway's tracing calls of one answer→consume cost a worker's process, SDK and export included.

``python -m bench.tracing_cost [--against FILE] [--chunks N]`` replays, without a database or a broker, the
tracing calls a pool child makes for one resume of the throughput case (its CONSUMER span, the claim's
``follow`` and ``annotate``, the ids its events, statements and log lines read, the commit's span) on
``parkway/tracing.py`` set up as a worker sets it up, exporting every span (``always_on``) over OTLP/HTTP to
bench/receiver.py; each chunk ends with ``force_flush``, so the batch processor's encoding and post are in it.
CPU is the whole process's (``time.process_time``: the exporter thread included). ``--against FILE``: another
version of tracing.py (e.g. ``git show main:parkway/tracing.py > /tmp/t.py``) loaded beside it as its own
module, with its own SDK pipeline, chunks interleaved. Untraced (a copy never set up, as with no ``OTEL_*``)
runs the same calls: the baseline of the same run; only differences and ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from types import ModuleType

from bench.harness import free_port

CHUNK = 200  # executions between two force_flush: about a real batch's size in spans


def load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def execution(t: ModuleType, n: int) -> None:
    """The tracing calls of one resume of the throughput case (tasks/worker.py, tasks/executor.py, the store's
    statements and events, one log line of the claim and one of Celery's at the end)."""
    cid = f"c{n:024d}"
    with t.span("parkway.resume_step", kind="consumer", root=True, follows=t.publisher(None), continuation_id=cid):
        t.traceparent(), t.trace_id()  # the claim statement's binds
        t.follow(None, None)
        t.annotate(run_id=f"r{n}", step_id=f"s{n}", step="bench.ask", continuation="bench.done@1",
                   attempt=1, principal="bench-agent", waits="q", waited_s=0.25)  # fmt: skip
        with t.span("parkway.commit", outcome="Complete"), nullcontext():
            for _ in range(3):  # the commit's statements and events
                t.traceparent(), t.trace_id()
        t.annotate(outcome="Complete")
        t.ids(), t.ids()  # log lines


def chunk_us(t: ModuleType, start: int) -> float:
    began = time.process_time()
    for n in range(start, start + CHUNK):
        execution(t, n)
    t.flush()
    return (time.process_time() - began) * 1e6 / CHUNK


def listening(port: int) -> None:
    for _ in range(500):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.01)
    raise RuntimeError(f"bench.receiver is not listening on {port}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.tracing_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--against", help="another tracing.py, measured beside this tree's")
    p.add_argument("--chunks", type=int, default=60, help="chunks of each variant (default 60)")
    args = p.parse_args(argv)
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.receiver", str(port)])
    try:
        listening(port)
        os.environ.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_TRACES_SAMPLER="always_on")
        variants = {
            "untraced": load("parkway/tracing.py", "tracing_untraced"),
            "traced (this tree)": load("parkway/tracing.py", "tracing_this"),
        }
        if args.against:
            variants[f"untraced ({args.against})"] = load(args.against, "tracing_against_untraced")
            variants[f"traced ({args.against})"] = load(args.against, "tracing_against")
        for name, module in variants.items():
            if name.startswith("traced"):
                assert module.setup("parkway-bench"), name
            chunk_us(module, 0)  # warm: imports, first export's connection
        times: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(args.chunks):
            for name, module in variants.items() if i % 2 else reversed(variants.items()):
                times[name].append(chunk_us(module, (i + 1) * CHUNK))
        base = statistics.median(times["untraced"])
        load_avg = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"CPU per execution, median of {args.chunks} chunks of {CHUNK} (load {load_avg}):")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:40} {median:7.1f} µs ({min(values):.1f}..{max(values):.1f}); "
                  f"tracing's own {median - base:6.1f} µs")  # fmt: skip
    finally:
        sink.terminate()
        sink.wait()


if __name__ == "__main__":
    main()
