"""The contract's own floor, rung by rung (issue 42): ``python -m bench.ladder``.

Beside bare Celery (``bench.bare``), the durable floor (``bench.floor``) and Parkway itself (this tree, driven
as ``bench.ab`` drives one: ``bench.abtree.Tree``), a LADDER of minimal implementations that import nothing of
Parkway, each adding one contract element to the rung below (``bench.ladder_sql`` says which; the worker is
``bench.ladder_app``). In one run, interleaved within each rep (the order reversed every other rep), each
measures completions per second and CPU per completion by process kind (``bench.meter.Meter``: worker,
answering process, PostgreSQL backends, Redis); then, once, its row writes per completion
(``pg_stat_user_tables``, read once every backend has flushed its counts). The table says what each element
costs at least, and how far Parkway is from its own contract's minimum.

    python -m bench.ladder --n 2000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench import harness, ladder_sql
from bench.abtree import WORKER_FLAGS, Bare, Tree, clean_env, start_worker
from bench.harness import ROOT, Worker, children_of, log
from bench.meter import Meter, Sample, add, cell, ratio_cell
from bench.runners import BareRunner, FloorRunner, _Runner

KINDS = ("total", "worker", "answering", "api", "postgresql", "redis")
TREE_INDEX = 9  # parkway_ab_9 and Redis index 9: clear of bench.ab's own (1, 2) should one run beside
BROKER_INDEX = 2  # the ladder worker's Redis index (bench.bare's is 0)


class LadderWorker:
    """``bench.ladder_app``'s worker on the bare baseline's database (each rung has its own tables)."""

    def __init__(self, bare: Bare, redis_url: str, out_dir: Any) -> None:
        self.bare, self.db_name, self.out_dir = bare, bare.db_name, out_dir
        self.url = harness.database_url(bare.db_name).replace("postgresql+psycopg://", "postgresql://")
        self.broker = f"{redis_url}/{BROKER_INDEX}"
        self.worker: Worker | None = None

    def start(self, rungs: list[int]) -> None:
        projections = self.out_dir / "projections"
        projections.mkdir(parents=True, exist_ok=True)
        settings = {
            "BENCH_LADDER_BROKER_URL": self.broker,
            "BENCH_LADDER_DATABASE_URL": self.url,
            "BENCH_LADDER_DIR": str(projections),
        }
        os.environ.update(settings)  # before bench.ladder_app is imported: its app reads the broker
        with psycopg.connect(self.url, autocommit=True) as conn:
            for k in rungs:
                for statement in ladder_sql.ddl(k):
                    conn.execute(statement)
        from bench import ladder_app

        celery = [sys.executable, "-m", "celery", "-A", "bench.ladder_app:app", "worker", "-l", "info"]
        cmd = [*celery, *WORKER_FLAGS, "-n", "ladder@%h", "-Q", ladder_app.QUEUE]
        env = clean_env(**settings, PYTHONPATH=str(ROOT))
        self.worker = start_worker(cmd, env=env, cwd=ROOT, name="ladder", out_dir=self.out_dir)

    def pids(self) -> dict[str, list[int]]:
        assert self.worker is not None
        return {"worker": [self.worker.proc.pid, *children_of(self.worker.proc.pid)], "answering": [os.getpid()]}


class RungRunner(_Runner):
    """One rung: its waits made pending, answered by one statement on the producer thread's connection,
    then its continuation sent; ``bench.ladder_app``'s task claims and consumes it."""

    def __init__(self, worker: LadderWorker, rung: int) -> None:
        from bench import ladder_app

        self.app, self.bare, self.next_id, self.rung = ladder_app, worker, 1, rung
        self.answer_sql, self.done_sql = ladder_sql.answer(rung), ladder_sql.done(rung)
        self.conn, self.errors = self.connect(), list[BaseException]()

    @staticmethod
    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(os.environ["BENCH_LADDER_DATABASE_URL"], autocommit=True)

    def rows(self, n: int) -> list[int]:
        first, self.next_id = self.next_id, self.next_id + n
        for statement in ladder_sql.seed(self.rung):
            self.conn.execute(statement, {"first": first, "last": first + n - 1})
        return list(range(first, first + n))

    def done(self, ids: list[int]) -> int:
        if self.errors:  # a producer thread failed: its waits will never complete
            raise RuntimeError(f"L{self.rung}: {self.errors[0]!r}")
        row = self.conn.execute(self.done_sql, {"first": ids[0], "last": ids[-1]}).fetchone()
        return int(row[0]) if row else 0

    def produce(self, conn: psycopg.Connection[Any], ids: list[int]) -> None:
        params: dict[str, Any] = {"value": '{"answer": "yes"}', "who": ladder_sql.ANSWERER}
        try:
            for wait_id in ids:
                params.update(id=wait_id, response_id=f"r{self.rung}-{wait_id}")
                if conn.execute(self.answer_sql, params).fetchone() is not None:
                    self.app.app.send_task(self.app.RESUME, args=[self.rung, wait_id], queue=self.app.QUEUE)
        except BaseException as exc:
            self.errors.append(exc)
            raise


def tree_leg(tree: Tree, n: int, threads: int) -> tuple[float, dict[str, float]]:
    parked = tree.ask(cmd="park", n=n)
    log(f"    parkway: parked {parked['parked']} in {parked['seconds']:.1f}s")
    with Meter(tree.pids(), tree.db_name) as meter:
        got = tree.ask(cmd="answer", mode="python", threads=threads)
    if got["error_count"]:
        raise RuntimeError(f"parkway: {got['error_count']} answers failed, e.g. {got['errors'][0]}")
    return float(got["per_s"]), meter.per_unit(got["n"])


# --------------------------------------------------------------------------- row writes, counted once

_WRITES = "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables"
SETTLED_S = 11.0  # an idle backend flushes its table counts within 10 s (PGSTAT_IDLE_INTERVAL)


def settled_writes(urls: list[str], timeout: float = 90.0) -> dict[str, tuple[int, int]]:
    """Row writes (and HOT updates) by ``db:table`` once no count has moved for ``SETTLED_S``."""

    def read() -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for url in urls:
            with psycopg.connect(url, autocommit=True) as conn:
                for name, writes, hot in conn.execute(_WRITES).fetchall():
                    out[f"{url.rsplit('/', 1)[-1]}:{name}"] = (int(writes), int(hot))
        return out

    last, since, deadline = read(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < SETTLED_S and time.monotonic() < deadline:
        time.sleep(0.5)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last


def subject_of(key: str, tree_db: str) -> str | None:
    db, table = key.split(":", 1)
    if db == tree_db:
        return "parkway"
    if table == "bare_rows":
        return "bare"
    if table == "bare_waits":
        return "floor"
    rung = table.split("_", 1)[0]
    return rung.upper() if rung[:1] == "l" and rung[1:].isdigit() else None


def count_writes(runners: dict[str, Any], tree: Tree, urls: list[str], n: int, out: dict[str, float]) -> None:
    """Every subject's ``n`` completions between two settled reads of the counts (seeding before the first)."""
    seeded = {name: runner.rows(n) for name, runner in runners.items()}
    tree.ask(cmd="park", n=n)
    before = settled_writes(urls)
    for name, runner in runners.items():
        runner.produce(runner.conn, seeded[name])
        while runner.done(seeded[name]) < n:
            time.sleep(0.01)
    tree.ask(cmd="answer", mode="python", threads=1)
    after = settled_writes(urls)
    for key, (writes, hot) in after.items():
        who = subject_of(key, tree.db_name)
        if who is not None:
            b_writes, b_hot = before.get(key, (0, 0))
            out[f"{who} writes"] = out.get(f"{who} writes", 0.0) + (writes - b_writes) / n
            out[f"{who} hot"] = out.get(f"{who} hot", 0.0) + (hot - b_hot) / n
            if who == "parkway" and writes > b_writes:
                out[f"parkway table {key.split(':', 1)[1]}"] = (writes - b_writes) / n


# --------------------------------------------------------------------------- the report


def increment(a: list[float] | None, b: list[float] | None, digits: int) -> str:
    """Each rep's a - b: median (min-max)."""
    if not a or not b:
        return "-"
    return cell([x - y for x, y in zip(a, b, strict=False)], digits)


def report(names: list[str], s: Sample, writes: dict[str, float]) -> str:
    lines = ["| subject | completions/s | CPU ms per completion: total | worker | answering | PostgreSQL | Redis "
             "| row writes (HOT) | CPU ms over the rung below | /s ÷ the rung below |",
             "|" + "---|" * 10]  # fmt: skip
    below = None
    for name in names:
        w = f"{writes[f'{name} writes']:.2f} ({writes.get(f'{name} hot', 0):.2f})" if f"{name} hot" in writes else "-"
        cpu = [cell(s.get(f"{name} CPU {kind} ms"), 2) for kind in ("total", "worker", "answering")]
        cpu += [cell(s.get(f"{name} CPU {kind} ms"), 2) for kind in ("postgresql", "redis")]
        step = below is not None and name not in ("bare", "parkway")
        over = increment(s.get(f"{name} CPU total ms"), s.get(f"{below} CPU total ms"), 2) if step else ""
        rate = ratio_cell(s.get(f"{name} /s"), s.get(f"{below} /s")) if step else ""
        lines.append(f"| {name} | {cell(s.get(f'{name} /s'))} | " + " | ".join(cpu) + f" | {w} | {over} | {rate} |")
        if name != "bare":
            below = name
    top = [n for n in names if n.startswith("L")][-1:]
    lines += ["", "| ratio (median of medians; range: each rep's own) | completions/s | CPU per completion |",
              "|---|---|---|"]  # fmt: skip
    pairs = [("floor", "bare"), ("parkway", "floor")] + [(t, "floor") for t in top] + [("parkway", t) for t in top]
    for a, b in pairs:
        if f"{a} /s" in s and f"{b} /s" in s:
            rate, cpu = (
                ratio_cell(s[f"{a} /s"], s[f"{b} /s"]),
                ratio_cell(s[f"{a} CPU total ms"], s[f"{b} CPU total ms"]),
            )
            lines.append(f"| {a} ÷ {b} | {rate} | {cpu} |")
    tables = sorted((k.removeprefix("parkway table "), v) for k, v in writes.items() if k.startswith("parkway table "))
    if tables:
        lines += ["", "Parkway's row writes per completion by table: " + ", ".join(f"{t} {v:.2f}" for t, v in tables)]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ladder", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000, help="completions per subject per rep (default 1000)")
    p.add_argument("--reps", type=int, default=3, help="reps (default 3)")
    p.add_argument("--threads", type=int, default=4, help="producer threads (default 4)")
    p.add_argument("--rungs", default="1,2,3,4,5,6", help="rungs to run (default 1,2,3,4,5,6)")
    p.add_argument("--warm", type=int, default=100, help="completions per subject before the reps (default 100)")
    p.add_argument("--writes-n", type=int, default=200, help="completions per subject counted for row writes")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rungs = [int(k) for k in args.rungs.split(",")]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = ROOT / "bench" / "out" / f"ladder-{stamp}"
    harness.install_cleanup()
    redis_url = harness.start_private_redis(out_dir)
    bare = Bare(redis_url=redis_url, out_dir=out_dir, db_name="parkway_h42l2_bare")
    tree = Tree(label="parkway", path=ROOT, index=TREE_INDEX, redis_url=redis_url, out_dir=out_dir)
    samples: Sample = {}
    writes: dict[str, float] = {}
    loads = [os.getloadavg()]
    try:
        bare.start()
        ladder = LadderWorker(bare, redis_url, out_dir)
        ladder.start(rungs)
        tree.start()
        runners: dict[str, Any] = {"bare": BareRunner(bare), "floor": FloorRunner(bare)}
        runners.update({f"L{k}": RungRunner(ladder, k) for k in rungs})
        names = [*runners, "parkway"]
        log(f"warm-up: {args.warm} completions each")
        for runner in runners.values():
            runner.throughput(args.warm, args.threads)
        tree_leg(tree, args.warm, args.threads)
        for rep in range(args.reps):
            order = names[::-1] if rep % 2 else names
            loads.append(os.getloadavg())
            log(f"  rep {rep + 1}/{args.reps} (load {' '.join(f'{x:.2f}' for x in loads[-1])})")
            for name in order:
                rate, cpu = (
                    tree_leg(tree, args.n, args.threads)
                    if name == "parkway"
                    else runners[name].throughput(args.n, args.threads)
                )
                add(samples, f"{name} /s", rate)
                for kind in KINDS:
                    add(samples, f"{name} CPU {kind} ms", cpu.get(kind, 0.0))
                log(f"    {name:7}: {rate:6.0f} /s, CPU {cpu['total']:.2f} ms per completion")
        if args.writes_n:
            log(f"row writes: {args.writes_n} completions each, counted once every backend flushed")
            urls = [ladder.url, harness.database_url(tree.db_name).replace("postgresql+psycopg://", "postgresql://")]
            count_writes(runners, tree, urls, args.writes_n, writes)
        loads.append(os.getloadavg())
    finally:
        harness.cleanup()
        for name in (bare.db_name, tree.db_name):
            harness.drop_database(name)
    text = report(names, samples, writes)
    load_text = ", ".join(f"{a:.2f}" for a, _, _ in loads)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    text += f"\n\n`--n {args.n} --reps {args.reps} --threads {args.threads}`; 1-min load at start, each rep, end: "
    text += load_text
    print(text, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = {"args": vars(args), "loads": loads, "samples": samples, "medians": medians, "writes": writes}
    (out_dir / "results.json").write_text(json.dumps(raw, indent=2))
    (out_dir / "results.md").write_text(text + "\n")
    print(f"results: {(out_dir / 'results.md').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
