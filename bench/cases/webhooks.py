"""Webhooks (issue 32): deliveries/s of one subscription and of ten against a local receiver; the lag of a
subscription behind the throughput case (sampled while it runs); and answer → continuation throughput with
one subscription on, beside none, in the same run (their order alternating by rep).

Deliveries run on an outbound worker of their own beside the worker, as deployed (``parkway up``,
docker-compose), each ``-c 2``: they share the machine's cores with continuations, not their processes. A
``celery beat`` of the case sends the sweep, which is what publishes deliveries (``PARKWAY_SWEEP_INTERVAL_S``, 5 s
unless set).
"""

from __future__ import annotations

import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import text

from bench import seed
from bench.cases.common import Bench, CpuMeter, loadavg, park_many, ratio
from bench.cases.throughput import run_parkway_throughput
from bench.harness import free_port, log, spawn, stop_process
from models import store
from models.webhooks import new_secret
from parkway.children import OUTBOUND_QUEUES, WORK_QUEUES
from parkway.crypto import seal
from parkway.db import get_engine, transaction
from parkway.settings import get_settings
from tasks.publish import publish_webhooks

SAMPLE_S = 0.25  # how often the lag is read while the throughput case runs
NEWEST = text("SELECT coalesce(max(seq), 0) FROM events")
LAG = text(
    "SELECT (SELECT count(*) FROM events e WHERE e.seq > w.cursor),"
    " extract(epoch FROM now() - (SELECT e.at FROM events e WHERE e.seq > w.cursor ORDER BY e.seq LIMIT 1))"
    " FROM webhooks w WHERE w.id = :id"
)
COUNT_BETWEEN = text("SELECT count(*) FROM events WHERE seq > :a AND seq <= :b")
BEHIND = text("SELECT count(*) FROM webhooks WHERE id = ANY(:ids) AND cursor < :newest")


@dataclass(frozen=True)
class Receiver:
    url: str
    pid: int


@contextmanager
def receiver(bench: Bench) -> Iterator[Receiver]:
    """The receiver subprocess (bench/receiver.py)."""
    port = free_port()
    proc = spawn([sys.executable, "-m", "bench.receiver", str(port)], env=bench.services.child_env(),
                 log_path=bench.services.out_dir / "logs" / "receiver.log")  # fmt: skip
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the webhook receiver did not start") from None
            time.sleep(0.05)
    try:
        yield Receiver(f"http://127.0.0.1:{port}/hook", proc.pid)
    finally:
        stop_process(proc, grace_s=2)


@contextmanager
def beat(bench: Bench) -> Iterator[None]:
    """``celery beat`` sending the sweep on its cadence, as deployed."""
    logs = bench.services.out_dir / "logs"
    cmd = [sys.executable, "-m", "celery", "-A", "tasks.celery_app:app", "beat", "-l", "info",
           "-s", str(logs / "webhooks-beat.schedule")]  # fmt: skip
    proc = spawn(cmd, env=bench.services.child_env(), log_path=logs / "webhooks-beat.log")
    try:
        yield
    finally:
        stop_process(proc, grace_s=5)


def subscribe(url: str, count: int) -> list[str]:
    """``count`` subscriptions to every event, each starting at the present."""
    ids = []
    with transaction() as session:
        for _ in range(count):
            made = store.create_webhook(
                session, url=url, events=["*"], targets=None, description="bench", secret_sealed=seal(new_secret())
            )
            ids.append(made.id)
    return ids


def unsubscribe(ids: list[str]) -> None:
    with transaction() as session:
        for webhook_id in ids:
            store.delete_webhook(session, webhook_id)


def newest() -> int:
    with transaction() as session:
        return int(session.execute(NEWEST).scalar_one())


def wait_caught_up(ids: list[str], upto: int, *, timeout: float) -> float:
    """Wait until every subscription's cursor is at ``upto`` or past it; returns when that was seen."""
    deadline = time.monotonic() + timeout
    while True:
        with transaction() as session:
            behind = session.execute(BEHIND, {"ids": ids, "newest": upto}).scalar_one()
        if not behind:
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{behind} of {len(ids)} subscriptions not caught up after {timeout:.0f}s")
        time.sleep(0.02)


def write_events(count: int) -> int:
    """``count`` events of one run, in one transaction (the rows deliveries read); returns the newest seq."""
    run_id = seed.bulk_parked(1)[0].run_id
    with transaction() as session:
        session.execute(
            text(
                "INSERT INTO events (run_id, type, at, data) SELECT :run_id, 'step.completed', now(),"
                ' CAST(\'{"step_id": "bench", "seq": 1}\' AS json) FROM generate_series(1, :n)'
            ),
            {"run_id": run_id, "n": count},
        )
    return newest()


def deliveries_per_s(bench: Bench, to: Receiver, subscriptions: int, events: int) -> tuple[float, dict[str, float]]:
    """A backlog of ``events`` for each of ``subscriptions`` (made before the events), then their delivery
    tasks published as the sweep does: deliveries per second until every cursor is at the newest event, and
    the CPU each delivery cost (ms, by process kind: the receiver's too)."""
    ids = subscribe(to.url, subscriptions)
    try:
        upto = write_events(events)
        with CpuMeter(bench, others={"receiver": to.pid}) as meter:
            t0 = time.time()
            publish_webhooks(ids)
            t1 = wait_caught_up(ids, upto, timeout=max(300.0, subscriptions * events / 20))
    finally:
        unsubscribe(ids)
    rate, cpu = subscriptions * events / (t1 - t0), meter.per_unit(subscriptions * events)
    bench.record("webhooks", {"variant": f"deliver x{subscriptions}", "events": events, "seconds": t1 - t0,
                              "per_s": rate, "cpu_ms": cpu, "load": loadavg()})  # fmt: skip
    return rate, cpu


class LagSampler:
    """A thread reading, every ``SAMPLE_S``, how far a subscription trails the log: the events after its
    cursor, and the age of the oldest of them."""

    def __init__(self, webhook_id: str) -> None:
        self.webhook_id = webhook_id
        self.samples: list[tuple[float, int, float]] = []  # (seconds since start, events behind, age s)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LagSampler:
        self.started = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        with get_engine().connect() as conn:
            while not self.done.wait(SAMPLE_S):
                behind, age = conn.execute(LAG, {"id": self.webhook_id}).one()
                conn.rollback()  # a new snapshot for the next sample
                self.samples.append((time.monotonic() - self.started, int(behind), float(age or 0.0)))

    def quarters(self) -> list[float]:
        """The median events behind in each quarter of the sampled time."""
        if not self.samples:
            return [0.0] * 4
        end = self.samples[-1][0]
        return [
            statistics.median([b for t, b, _ in self.samples if q * end / 4 <= t <= (q + 1) * end / 4] or [0])
            for q in range(4)
        ]


def answer_and_consume(
    bench: Bench, to: Receiver, n: int, *, subscribed: bool
) -> tuple[float, dict[str, float], dict[str, float]]:
    """The throughput case (``n`` steps parked, then answered until consumed), with one subscription on
    when ``subscribed``: its rate, the subscription's lag, and the CPU per answer → consume. The subscription
    is made once the steps are parked, so it delivers what the answers write (not the parking that sets the
    case up)."""
    parked = park_many(bench, n)
    with CpuMeter(bench, others={"receiver": to.pid}) as meter:
        if subscribed:
            rate, lag = with_subscription(bench, to.url, parked)
        else:
            (rate, _), lag = run_parkway_throughput(bench, n, http_base=None, parked=parked), {}
    return rate, lag, meter.per_unit(n)


def with_subscription(bench: Bench, url: str, parked: list[seed.Parked]) -> tuple[float, dict[str, float]]:
    """The throughput case on ``parked`` with one subscription on; its rate, and how far the subscription
    trailed (it is deleted at the run's end, caught up or not: a delivery in flight then stops within one
    batch)."""
    (webhook_id,) = subscribe(url, 1)
    n = len(parked)
    try:
        first = newest()
        with LagSampler(webhook_id) as sampler:
            rate, _ = run_parkway_throughput(bench, n, http_base=None, parked=parked)
            run_s = time.monotonic() - sampler.started
        with transaction() as session:
            cursor = int(
                session.execute(text("SELECT cursor FROM webhooks WHERE id = :id"), {"id": webhook_id}).one()[0]
            )
        written, delivered = _count_between(first, newest()), _count_between(first, cursor)
    finally:
        unsubscribe([webhook_id])
    quarters = sampler.quarters()
    lag = {
        "events_per_s": written / run_s,
        "delivered_per_s": delivered / run_s,
        "behind_end": float(written - delivered),
        "age_max_s": max((a for _, _, a in sampler.samples), default=0.0),
        "growth": quarters[3] / max(quarters[1], 1.0),
        "run_s": run_s,
        "samples": float(len(sampler.samples)),
    }
    bench.record("webhooks", {"variant": "lag", "n": n, "quarters": quarters, **lag, "load": loadavg()})
    return rate, lag


def _count_between(first: int, upto: int) -> int:
    with transaction() as session:
        found = session.execute(COUNT_BETWEEN, {"a": first, "b": upto}).scalar_one()
    return int(found)


def _split(cpu: dict[str, float]) -> str:
    return ", ".join(f"{kind} {cpu[kind]:.2f} ms" for kind in ("workers", "receiver", "postgres", "producer"))


def case_webhooks(bench: Bench) -> None:
    args = bench.args
    n, backlog = args.n, args.webhook_events
    log(
        f"== webhooks: backlog {backlog} events; throughput N={n}, {args.reps} reps; sweep every "
        f"{get_settings().sweep_interval_s:g}s; a worker and an outbound worker, -c 2 each"
    )
    one_m = bench.metric("webhooks", "deliveries/s, one subscription", "/s")
    ten_m = bench.metric("webhooks", "deliveries/s, ten subscriptions (all of them)", "/s")
    none_m = bench.metric("webhooks", "answer→consume (Python), no subscription", "/s")
    on_m = bench.metric("webhooks", "answer→consume (Python), one subscription", "/s")
    ratio_m = bench.metric("webhooks", "ratio one subscription ÷ none", "x", ">= 0.9")
    growth_m = bench.metric(
        "webhooks", "lag growth: events behind, last quarter ÷ second quarter", "x", "<= 1.2",
        note="median of the samples in each quarter of the run",
    )  # fmt: skip
    bench.services.env.setdefault("PARKWAY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")  # the receiver's address
    with receiver(bench) as to:
        bench.services.start_worker(queues=WORK_QUEUES)
        bench.services.start_worker(queues=OUTBOUND_QUEUES)
        for rep in range(args.reps):
            log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
            for count, metric in ((1, one_m), (10, ten_m)):
                rate, cpu = deliveries_per_s(bench, to, count, backlog)
                metric.add(rate)
                for kind in ("workers", "receiver", "postgres"):
                    bench.metric("webhooks", f"CPU per delivery x{count}, {kind}", "ms").add(cpu[kind])
                log(f"    deliveries/s, {count} subscription(s): {rate:.0f}; CPU per delivery {_split(cpu)}")
        with beat(bench):
            for rep in range(args.reps):
                rates: dict[str, float] = {}
                for variant in ("none", "one") if rep % 2 == 0 else ("one", "none"):
                    rates[variant], lag, cpu = answer_and_consume(bench, to, n, subscribed=variant == "one")
                    bench.metric("webhooks", f"CPU per answer→consume, {variant} subscription", "ms").add(cpu["total"])
                    log(f"    {variant} subscription: CPU per answer→consume {cpu['total']:.2f} ms, {_split(cpu)}")
                    if variant == "none":
                        continue
                    growth_m.add(lag["growth"])
                    for key, name, unit in (
                        ("events_per_s", "events written /s during the run", "/s"),
                        ("delivered_per_s", "events delivered /s during the run", "/s"),
                        ("behind_end", "lag: events behind at the run's end", ""),
                        ("age_max_s", "lag: oldest undelivered event, most", "s"),
                    ):
                        bench.metric("webhooks", name, unit).add(lag[key])
                    log(
                        f"    lag over {lag['run_s']:.1f}s: events written {lag['events_per_s']:.0f}/s, delivered "
                        f"{lag['delivered_per_s']:.0f}/s; behind by quarter {lag['growth']:.2f} x, "
                        f"{lag['behind_end']:.0f} at the end, oldest {lag['age_max_s']:.1f}s"
                    )
                none_m.add(rates["none"])
                on_m.add(rates["one"])
                ratio_m.add(ratio(rates["one"], rates["none"]))
                log(f"    answer→consume: none {rates['none']:.0f}/s, one subscription {rates['one']:.0f}/s")
    bench.services.stop_workers()
