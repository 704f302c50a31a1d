"""Worker CPU per task of the same CAS task (``bench.overhead_tasks``) on the bare app and on Parkway's
app, real ``celery worker`` processes side by side, reps alternating.

``python -m bench.overhead_workers [N] [REPS] [VARIANT …]``: a VARIANT is ``bare``, ``parkway`` or
``parkway-off=<pieces>`` (see ``OVERHEAD_OFF`` in ``bench.overhead_tasks``), any of them with ``+sqla``
(the task ``overhead.cas_sqla``). Prints the worker's CPU per
task (parent and pool children, from /proc), median and range over the reps, and each variant ÷ bare.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from celery import Celery

from bench import harness
from bench.abtree import WORKER_FLAGS, clean_env, start_worker
from bench.harness import ROOT, children_of, log, proc_cpu_ms

DB = "parkway_overhead_probe"
QUEUES = {"bare": "bare", "parkway": "parkway.continuations"}


def start(variant: str, index: int, redis_url: str, db_url: str, out_dir: Path) -> harness.Worker:
    app_kind, _, off = variant.split("+")[0].partition("-off=")
    env = clean_env(
        OVERHEAD_DATABASE_URL=db_url.replace("postgresql+psycopg://", "postgresql://"),
        OVERHEAD_OFF=off,
        PYTHONPATH=str(ROOT),
        BENCH_BARE_BROKER_URL=f"{redis_url}/{index}",
        BENCH_BARE_DATABASE_URL=db_url.replace("postgresql+psycopg://", "postgresql://"),
        PARKWAY_DATABASE_URL=db_url,
        PARKWAY_BROKER_URL=f"{redis_url}/{index}",
        PARKWAY_SECRET_KEY=harness.SECRET_KEY,
        PARKWAY_IMPORTS="bench.overhead_tasks",
        PARKWAY_HOME=str(out_dir / f"home-{index}"),
    )
    target = "bench.bare:app" if app_kind == "bare" else "tasks.celery_app:app"
    celery = [sys.executable, "-m", "celery", "-A", target, "worker", "-l", "info", "--include", "bench.overhead_tasks"]
    queues = QUEUES[app_kind] if app_kind == "bare" else harness.QUEUES
    cmd = [*celery, *WORKER_FLAGS, "-n", f"probe{index}@%h", "-Q", queues]
    return start_worker(cmd, env=env, cwd=ROOT, name=f"probe{index}-{variant}", out_dir=out_dir)


def run_once(worker: harness.Worker, producer: Celery, queue: str, task: str, conn: psycopg.Connection, first: int,
             n: int, threads: int = 4) -> tuple[float, float]:  # fmt: skip
    """Send ``n`` CAS tasks from ``threads`` threads; (worker CPU ms per task, tasks/s)."""
    ids = list(range(first, first + n))
    conn.execute("INSERT INTO bare_rows (id, status) SELECT g, 'queued' FROM generate_series(%s::bigint, %s::bigint) g",
                 (ids[0], ids[-1]))  # fmt: skip
    pids = [worker.proc.pid, *children_of(worker.proc.pid)]
    before = sum(proc_cpu_ms(p) for p in pids)
    t0 = time.time()
    pool = [threading.Thread(target=lambda c: [producer.send_task(task, args=[i], queue=queue) for i in c],
                             args=(ids[k::threads],)) for k in range(threads)]  # fmt: skip
    for t in pool:
        t.start()
    sql = "SELECT count(*) FROM bare_rows WHERE id BETWEEN %s AND %s AND status = 'done'"
    deadline = time.monotonic() + 300
    while (conn.execute(sql, (ids[0], ids[-1])).fetchone() or (0,))[0] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{worker.name}: not done in 300 s")
        time.sleep(0.01)
    t1 = time.time()
    for t in pool:
        t.join()
    return (sum(proc_cpu_ms(p) for p in pids) - before) / n, n / (t1 - t0)


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 2000
    reps = int(argv[1]) if len(argv) > 1 else 3
    variants = argv[2:] or ["bare", "parkway"]
    out_dir = ROOT / "bench" / "out" / f"overhead-{time.strftime('%Y%m%dT%H%M%S')}"
    from bench.run import hold_the_machine

    busy = hold_the_machine()
    if busy is not None:
        log(f"refused: {busy}")
        return 2
    harness.install_cleanup()
    redis_url = harness.start_private_redis(out_dir)
    db_url = harness.create_database(DB)
    env = clean_env(PARKWAY_DATABASE_URL=db_url, PARKWAY_SECRET_KEY=harness.SECRET_KEY,
                    PARKWAY_HOME=str(out_dir / "home-0"))  # fmt: skip
    subprocess.run([str(ROOT / ".venv" / "bin" / "parkway"), "migrate"], env=env, cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    conn = psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
    from bench.bare import TABLE_DDL

    conn.execute(TABLE_DDL)
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    try:
        workers = {v: start(v, i + 1, redis_url, db_url, out_dir) for i, v in enumerate(variants)}
        producers = {v: Celery(broker=f"{redis_url}/{i + 1}") for i, v in enumerate(variants)}
        first = 1
        for rep in range(reps + 1):  # the first rep warms up and is not counted
            order = variants if rep % 2 == 0 else list(reversed(variants))
            for v in order:
                queue = QUEUES["bare" if v.startswith("bare") else "parkway"]
                task = "overhead.cas_sqla" if v.endswith("+sqla") else "overhead.cas"
                got = run_once(workers[v], producers[v], queue, task, conn, first, n)
                first += n
                if rep:
                    results[v].append(got)
                log(f"rep {rep} {v:28} worker CPU {got[0]:.3f} ms/task, {got[1]:.0f} tasks/s")
    finally:
        harness.cleanup()
        conn.close()
        harness.drop_database(DB)
    base = statistics.median(c for c, _ in results[variants[0]])
    for v, got in results.items():
        cpu = [c for c, _ in got]
        rate = [r for _, r in got]
        med = statistics.median(cpu)
        print(f"{v:28} worker CPU {med:.3f} ms/task ({min(cpu):.3f}-{max(cpu):.3f}), ÷ {variants[0]} "
              f"{med / base:.2f}; {statistics.median(rate):.0f} tasks/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
