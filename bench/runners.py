"""The producers of the two baselines with none of Parkway (``bench.bare``'s app): bare Celery's
compare-and-set task, and the durable floor (``bench.floor``), each driven from this process's threads."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

from bench.abtree import Bare
from bench.meter import Meter

ANSWER_VALUE = '{"answer": "yes"}'


class _Runner:
    """Rows of ``table`` made in ``start`` state, driven to ``done`` by the producer threads (``produce``)."""

    table = ""
    start = ""

    def __init__(self, bare: Bare) -> None:
        from bench import bare as app  # after ``Bare.start`` has named the broker

        self.app, self.bare, self.next_id = app, bare, 1
        self.conn = self.connect()

    @staticmethod
    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(os.environ["BENCH_BARE_DATABASE_URL"], autocommit=True)

    def rows(self, n: int) -> list[int]:
        first, self.next_id = self.next_id, self.next_id + n
        self.conn.execute(
            f"INSERT INTO {self.table} (id, status) SELECT g, %s FROM generate_series(%s::bigint, %s::bigint) g",
            (self.start, first, first + n - 1),
        )
        return list(range(first, first + n))

    def done(self, ids: list[int]) -> int:
        row = self.conn.execute(
            f"SELECT count(*) FROM {self.table} WHERE id BETWEEN %s AND %s AND status = 'done'", (ids[0], ids[-1])
        ).fetchone()
        return int(row[0]) if row else 0

    def produce(self, conn: psycopg.Connection[Any], ids: list[int]) -> None:
        raise NotImplementedError

    def throughput(self, n: int, threads: int) -> tuple[float, dict[str, float]]:
        """Completions per second and CPU per completion by process kind, ``threads`` producing."""
        ids = self.rows(n)
        conns = [self.connect() for _ in range(threads)]  # opened before the window: their backends are metered
        with Meter(self.bare.pids(), self.bare.db_name) as meter:
            t0 = time.time()
            pool = [threading.Thread(target=self.produce, args=(conns[k], ids[k::threads])) for k in range(threads)]
            for thread in pool:
                thread.start()
            while self.done(ids) < n:
                time.sleep(0.01)
            t1 = time.time()
            for thread in pool:
                thread.join()
        for conn in conns:
            conn.close()
        return n / (t1 - t0), meter.per_unit(n)


class BareRunner(_Runner):
    """Bare Celery: each row queued, its task sent; the task's one compare-and-set makes it done."""

    table, start = "bare_rows", "queued"

    def produce(self, conn: psycopg.Connection[Any], ids: list[int]) -> None:
        for row_id in ids:
            self.app.app.send_task(self.app.CAS, args=[row_id], queue=self.app.QUEUE)

    def latency(self, rate: float, count: int) -> list[float]:
        ids = self.rows(count)
        sent: dict[int, float] = {}
        t0 = time.time()
        for k, row_id in enumerate(ids):
            if (wait := t0 + k / rate - time.time()) > 0:
                time.sleep(wait)
            self.app.app.send_task(self.app.CAS_LAT, args=[row_id], queue=self.app.QUEUE)
            sent[row_id] = time.time()
        deadline = time.monotonic() + 120
        while self.done(ids) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = self.conn.execute(
            "SELECT id, started FROM bare_rows WHERE id BETWEEN %s AND %s", (ids[0], ids[-1])
        ).fetchall()
        return sorted((float(started) - sent[int(i)]) * 1000 for i, started in rows if started is not None)


class FloorRunner(_Runner):
    """The durable floor: each wait answered by one durable statement on the thread's connection, then its
    continuation sent; the task claims and consumes it."""

    table, start = "bare_waits", "waiting"

    def produce(self, conn: psycopg.Connection[Any], ids: list[int]) -> None:
        for row_id in ids:
            if conn.execute(self.app.ANSWER_SQL, (ANSWER_VALUE, row_id)).fetchone() is not None:
                self.app.app.send_task(self.app.RESUME, args=[row_id], queue=self.app.QUEUE)
