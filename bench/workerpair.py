"""A worker's CPU per completion in two trees, paired: ``python -m bench.workerpair ADMIN_URL TREE_A TREE_B``.

What a pool child does per answered step, without the broker and the pool's pipes: Celery's own tracer of
``parkway.resume_step`` (``celery.app.trace.build_tracer``, what a prefork child runs for each message: the
task's signals, its log context, its INFO line), logging set up as a ``celery worker -l info`` child has
it (JSON lines, here to /dev/null), and the child's projector thread, which writes and passes on its own
clock as in a worker (never drained between chunks): a chunk counts its main thread's CPU while it drives
and every other thread's since the chunk before. One process per tree: this file, run in the tree with the
tree first on ``PYTHONPATH`` (its code; this file's own helpers, so an older tree can be measured), each
with its own scratch database on the server of ``ADMIN_URL``, nothing tracked there. Each side parks its
steps; per chunk, on command, it answers the chunk's steps in process (not counted), then drives their
continuations through the tracer, and reports that CPU and the database's backends' (``/proc/<pid>/schedstat``)
per completion. Chunks run A B, B A, …: read the median of B ÷ A per pair.

``--profile PATH``: no pairing; one side (TREE_A) under cProfile for its chunks, the stats written to PATH.
``--traced-b``: side B traces every span to a local OTLP/HTTP sink (bench/receiver.py), by the standard
``OTEL_*`` variables only; with the same tree as A and B, what tracing costs a pool child per completion,
its export thread included (issue 44).
``--py-spy PATH``: no pairing; one side (TREE_A) sampled by ``py-spy record --gil`` (every thread) while its
chunks run, its collapsed stacks written to PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

WARM_UP = 100
_STATEMENTS = runpy.run_path(str(Path(__file__).with_name("statements.py")))
_admin = _STATEMENTS["_admin"]
_PGPAIR = runpy.run_path(str(Path(__file__).with_name("pgpair.py")))  # its scratch database, chunks and report
_backends = _PGPAIR["_backends"]


class Child:
    """This process set up as a worker's pool child: logging, the child's start signal, the task's tracer."""

    def __init__(self, task_name: str | None = None) -> None:
        from celery import signals
        from celery.app.trace import build_tracer

        from tasks.celery_app import RESUME_STEP, app

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # the worker's lines go nowhere; the report goes to stdout
        app.loader.import_default_modules()  # as a worker does: tasks.worker and PARKWAY_IMPORTS
        app.log.setup(loglevel="INFO", redirect_stdouts=False)
        signals.worker_process_init.send(sender=None)
        task = app.tasks[task_name or RESUME_STEP]
        self.expect: Any = "committed" if task_name is None else True  # a resume's outcome, or the CAS's
        self.trace = build_tracer(task.name, task, app=app, eager=False, hostname="workerpair")
        self.others: dict[int, float] = {}

    def settle(self) -> None:
        """Wait for the projector to finish what it was given; later chunks count no thread's CPU before now."""
        from tasks.projection import drain_projections

        drain_projections()
        self.others = _threads_cpu()

    def run(self, continuation_ids: list[Any]) -> float:
        """Drive the continuations (the CAS task: its rows); the CPU (ms) this took: the main thread's during
        the drive, and every other thread's (the projector's, the lease keeper's) since the last call, wherever
        it ran."""
        began = time.thread_time()
        for cid in continuation_ids:
            task_id = uuid.uuid4().hex
            request = {"id": task_id, "delivery_info": {"routing_key": "parkway.continuations",
                                                        "exchange": "parkway.continuations"},
                       "hostname": "workerpair"}  # fmt: skip
            outcome = self.trace(task_id, (cid,), {}, request)
            assert outcome[0] == self.expect, outcome
        main = time.thread_time() - began
        others = _threads_cpu()
        spent, self.others = main + sum(others.values()) - sum(self.others.get(t, 0.0) for t in others), others
        return spent * 1000


def _threads_cpu() -> dict[int, float]:
    """CPU time (s) of each thread of this process but the main one."""
    used = {}
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and thread.ident is not None:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                used[thread.ident] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return used


def _answered(parked: list[Any]) -> list[str]:
    """Answer each in process (``tasks.sdk.answer``, as the API does); the ready continuations' ids."""
    from sqlalchemy import text

    from bench import seed
    from parkway.db import transaction
    from tasks import sdk

    for p in parked:
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
    with transaction() as session:
        rows = session.execute(text("SELECT id FROM continuations WHERE step_id = ANY(:s) AND status = 'ready'"),
                               {"s": [p.step_id for p in parked]})  # fmt: skip
        return list(rows.scalars())


def side(admin_url: str, chunk: int, chunks: int, profile: str | None, floor: bool) -> None:
    with _PGPAIR["scratch"](admin_url, "workerpair") as name:
        _run_side(admin_url, name, chunk, chunks, profile, floor)


def _run_side(admin_url: str, name: str, chunk: int, chunks: int, profile: str | None, floor: bool) -> None:
    os.environ["PARKWAY_IMPORTS"] = "bench.workflows"
    _STATEMENTS["use_scratch"](admin_url, name)
    from bench import seed
    from bench.workflows import CAS

    seed.setup_actors()
    parked: list[Any]
    if floor:  # the floor: bench.cas, a bare CAS task on the same app, through the same tracer
        rows = seed.seed_rows(0, WARM_UP + chunk * chunks)
        child, parked = Child(CAS), [[r] for r in rows]
        due: Any = lambda taken: [r[0] for r in taken]  # noqa: E731
    else:
        child, parked, due = Child(), seed.seed_parked(WARM_UP + chunk * chunks), _answered
    child.run(due(parked[:WARM_UP]))
    child.settle()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
    print("ready", flush=True)
    for k in range(chunks):
        sys.stdin.readline()
        ids = due(parked[WARM_UP + k * chunk : WARM_UP + (k + 1) * chunk])
        start = _backends(admin_url, name)
        if profiler is not None:
            profiler.enable()
        client = child.run(ids)
        if profiler is not None:
            profiler.disable()
        end = _backends(admin_url, name)
        backends = sum(end.values()) - sum(start.get(pid, 0.0) for pid in end)
        print(f"{backends / chunk:.4f} {client / chunk:.4f}", flush=True)
    if profiler is not None and profile:
        profiler.dump_stats(profile)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("admin_url", help="a database URL of the server, as a superuser (libpq form)")
    parser.add_argument("tree_a")
    parser.add_argument("tree_b", nargs="?", default=None)
    parser.add_argument("--chunk", type=int, default=100, help="completions per chunk (default 100)")
    parser.add_argument("--pairs", type=int, default=30, help="chunks of each tree (default 30)")
    parser.add_argument("--profile", default=None, help="cProfile TREE_A's chunks into this file (no pairing)")
    parser.add_argument("--py-spy", default=None, help="sample TREE_A's side with py-spy into this file (no pairing)")
    parser.add_argument("--floor", action="store_true", help="a third side: bench.cas in TREE_A, the floor")
    parser.add_argument("--traced-b", action="store_true", help="B traced to a local OTLP sink (TREE_B may be TREE_A)")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side(args.admin_url, args.chunk, args.pairs, args.profile, args.floor)
        return 0
    solo = bool(args.profile or args.py_spy)
    trees = {"A": args.tree_a} if solo else {"A": args.tree_a, "B": args.tree_b}
    if None in trees.values():
        parser.error("two trees, or one with --profile or --py-spy")
    with _otlp_sink() if args.traced_b else contextlib.nullcontext() as sink:
        traced = _traced_env(sink) if sink else {}
        sides = {label: _start(args, tree, env=traced if label == "B" else {}) for label, tree in trees.items()}
        if args.floor and not solo:
            sides[FLOOR] = _start(args, args.tree_a, floor=True)
        for process in sides.values():
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        spy = _spy(args.py_spy, sides["A"].pid) if args.py_spy else None
        figures: dict[str, list[tuple[float, float]]] = {label: [] for label in sides}
        order = list(sides)
        for k in range(args.pairs):
            for label in order if k % 2 == 0 else order[::-1]:
                figures[label].append(_chunk(sides[label]))
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            spy.wait(timeout=60)
        for process in sides.values():
            assert process.stdin is not None
            process.stdin.close()
            process.wait()
    if solo:
        xs = [x[1] for x in figures["A"]]
        where = args.profile or args.py_spy
        print(f"the tree's process, ms per completion (sampled): {statistics.median(xs):.3f}; in {where}")
        return 0
    if args.traced_b:
        print("B traces every span (100 % sampling) over OTLP/HTTP to bench/receiver.py; A is untraced")
    _report(figures["A"], figures["B"], (("the worker (all its threads)", 1), ("PostgreSQL", 0)))
    if args.floor:
        _above_floor(figures["A"], figures["B"], figures[FLOOR])
    return 0


@contextlib.contextmanager
def _otlp_sink() -> Any:
    """``--traced-b``: bench/receiver.py on a free port (it answers 200 at once), stopped after the block."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink = subprocess.Popen([sys.executable, "-m", "bench.receiver", str(port)], cwd=Path(__file__).parent.parent)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        sink.terminate()
        sink.wait(timeout=10)


def _traced_env(endpoint: str) -> dict[str, str]:
    """What a traced worker is given: the standard variables only (docs/operations.md "Tracing")."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_SERVICE_NAME": "parkway-workerpair"}  # fmt: skip


FLOOR = "floor"  # the third side's key


def _above_floor(a: list[Any], b: list[Any], floor: list[Any]) -> None:
    """The worker's CPU above the floor's (bench.cas through the same tracer), A and B, and B's ÷ A's per chunk
    triple (chunks run A B F, F B A, …)."""
    above = [(x[1] - f[1], y[1] - f[1]) for x, y, f in zip(a, b, floor, strict=True)]
    ratios = [y / x for x, y in above if x > 0]
    spread = [f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
              for v in ([f[1] for f in floor], [x for x, _ in above], [y for _, y in above], ratios)]  # fmt: skip
    print(f"the floor (bench.cas), ms per task: {spread[0]}; the worker above it, ms per completion: A {spread[1]}, "
          f"B {spread[2]}; B ÷ A per triple {spread[3]}, {len(ratios)} triples")  # fmt: skip


def _start(
    args: argparse.Namespace, tree: str, *, floor: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, args.admin_url, "-", "--side", "--chunk", str(args.chunk),
               "--pairs", str(args.pairs), *(["--floor"] if floor else [])]  # fmt: skip
    if args.profile:
        command += ["--profile", str(Path(args.profile).resolve())]
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(Path(tree).resolve())}
    return subprocess.Popen(command, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _spy(path: str, pid: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [exe, "record", "--pid", str(pid), "--rate", "500", "--format", "raw", "--output", path, "--threads",
               "--gil"]  # fmt: skip
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches before the first chunk
    return spy


_chunk, _report = _PGPAIR["_chunk"], _PGPAIR["_report"]  # a chunk's two figures: the backends', the tree's


if __name__ == "__main__":
    raise SystemExit(main())
