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
``--traced-a``: A traced too (two traced trees, or one tree with two settings, compared). ``--env-a`` /
``--env-b NAME=VALUE``: a variable for one side only (e.g. ``OTEL_TRACES_SAMPLER=always_off``: B makes its spans
but records and exports none). Each chunk also reports its main thread, its other threads (the projector, the
batch span processor's export thread) and the garbage collector's time (wall, in any thread), median and mean: a
full collection is rare, so its cost shows in the mean.
``--grind DIR``: no pairing; one side (TREE_A; traced with ``--traced-b``) under callgrind, counting instructions
only while it drives its chunks (not while it answers them), one file per thread in DIR: instruction counts do
not move with the host's load, so two trees or settings compare exactly (``callgrind_annotate``).
``--py-spy PATH``: no pairing; one side (TREE_A) sampled by ``py-spy record --gil`` (every thread) while its
chunks run, its collapsed stacks written to PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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
        self.split = (0.0, 0.0)  # the last run's main thread and other threads, ms
        self.collecting = [0.0, 0.0]  # the garbage collector: wall time (s) in collections, the last start
        gc.callbacks.append(self._collection)

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self.collecting[1] = now
        else:
            self.collecting[0] += now - self.collecting[1]

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
        rest, self.others = sum(others.values()) - sum(self.others.get(t, 0.0) for t in others), others
        self.split = main * 1000, rest * 1000
        return (main + rest) * 1000


def _threads_cpu() -> dict[int, float]:
    """CPU time (s) of each thread of this process but the main one."""
    used = {}
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and thread.ident is not None:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                used[thread.ident] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return used


_GRIND = {"on": False}  # --grind: this side runs under callgrind, counting only while it drives


def _grinding(on: bool) -> None:
    """Switch callgrind's counting for this process (``callgrind_control`` reaches it through vgdb)."""
    if _GRIND["on"]:
        switch = f"--instr={'on' if on else 'off'}"
        subprocess.run(["callgrind_control", switch, str(os.getpid())], check=True, capture_output=True)


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
        collected = child.collecting[0]
        _grinding(True)
        client = child.run(ids)
        _grinding(False)
        if profiler is not None:
            profiler.disable()
        end = _backends(admin_url, name)
        backends = sum(end.values()) - sum(start.get(pid, 0.0) for pid in end)
        main_ms, rest_ms, gc_ms = *child.split, (child.collecting[0] - collected) * 1000
        print(f"{backends / chunk:.4f} {client / chunk:.4f} {main_ms / chunk:.4f} {rest_ms / chunk:.4f} "
              f"{gc_ms / chunk:.4f}", flush=True)  # fmt: skip
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
    parser.add_argument("--grind", default=None, help="run TREE_A's side under callgrind, its output in this folder")
    parser.add_argument("--traced-a", action="store_true", help="A traced too (two traced trees compared)")
    parser.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE", help="a variable for A's side")
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE", help="a variable for B's side")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        _GRIND["on"] = bool(args.grind)
        side(args.admin_url, args.chunk, args.pairs, args.profile, args.floor)
        return 0
    solo = bool(args.profile or args.py_spy or args.grind)
    trees = {"A": args.tree_a} if solo else {"A": args.tree_a, "B": args.tree_b}
    if None in trees.values():
        parser.error("two trees, or one with --profile or --py-spy")
    with _otlp_sink() if args.traced_b or args.traced_a else contextlib.nullcontext() as sink:
        traced = _traced_env(sink) if sink else {}
        tracing = {"A": args.traced_a or solo, "B": True}  # --traced-b with --profile or --py-spy: the solo side traced
        given = {"A": dict(v.split("=", 1) for v in args.env_a), "B": dict(v.split("=", 1) for v in args.env_b)}
        sides = {label: _start(args, tree, env={**(traced if tracing[label] else {}), **given[label]})
                 for label, tree in trees.items()}  # fmt: skip
        if args.floor and not solo:
            sides[FLOOR] = _start(args, args.tree_a, floor=True)
        for process in sides.values():
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        spy = _spy(args.py_spy, sides["A"].pid) if args.py_spy else None
        figures: dict[str, list[tuple[float, ...]]] = {label: [] for label in sides}
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
        where = args.profile or args.py_spy or args.grind
        print(f"the tree's process, ms per completion (sampled): {statistics.median(xs):.3f}; in {where}")
        return 0
    if args.traced_b or args.traced_a:
        which = "A and B trace" if args.traced_a else "B traces"
        untraced = "" if args.traced_a else "; A is untraced"
        print(f"{which} every span (100 % sampling) over OTLP/HTTP to bench/receiver.py{untraced}")
    _report(figures["A"], figures["B"], PARTS)
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
    if args.grind:  # callgrind, counting only while the side drives its chunks (it switches itself: _grinding)
        out = str(Path(args.grind).resolve() / "callgrind.out.%p")
        command += ["--grind", args.grind]
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                   f"--callgrind-out-file={out}", *command]  # fmt: skip
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(Path(tree).resolve())}
    return subprocess.Popen(command, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _spy(path: str, pid: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [exe, "record", "--pid", str(pid), "--rate", "500", "--format", "raw", "--output", path, "--threads",
               "--gil"]  # fmt: skip
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches before the first chunk
    return spy


def _report(a: list[tuple[float, ...]], b: list[tuple[float, ...]], labels: Any) -> None:
    """Each figure's median (and mean: a rare full collection shows there) for A and B, and B ÷ A per pair."""
    for label, i in labels:
        xs, ys = [x[i] for x in a], [y[i] for y in b]
        ratios = [y / x for x, y in zip(xs, ys, strict=True) if x > 0]
        spread = [f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}; mean {statistics.fmean(v):.3f})"
                  for v in (xs, ys, ratios) if v]  # fmt: skip
        print(f"{label}, ms per completion: A {spread[0]}, B {spread[1]}; B ÷ A per pair "
              f"{spread[2] if ratios else '-'}, {len(ratios)} pairs")  # fmt: skip


# A chunk's figures, per completion: the backends', the tree's process, its main thread, its other threads, and the
# garbage collector's time in any thread (wall, while collecting).
PARTS = (("the worker (all its threads)", 1), ("… its main thread", 2), ("… its other threads", 3),
         ("… garbage collection (wall)", 4), ("PostgreSQL", 0))  # fmt: skip


def _chunk(process: subprocess.Popen[str]) -> tuple[float, ...]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    return tuple(float(x) for x in process.stdout.readline().split())


if __name__ == "__main__":
    raise SystemExit(main())
