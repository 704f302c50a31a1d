"""Remote handlers (issue 33): answer → continuation consumed (a) by the Celery workers, (b) by a Node pull
agent (the TypeScript client's ``worker()``, ``bench/remote_agent.mjs``) and (c) by a Node push handler, in
one run, their order rotating by rep; CPU per completion of each, and answer → handler start at a steady rate.

The Python path is the throughput case's (``bench.done@1``, run by ``celery worker -c 2``). The agent serves
``bench.rdone@1``, which no Celery worker serves: a continuation on it is remote when the answer makes it due
(``models.store.workers.remote_only``) and only lease calls take it. Its body is ``bench.done``'s: complete
with the answer. The answers are the SDK's, made by this process as in the throughput case; the agent talks
to a ``uvicorn api.app:app`` of the case. All three consumers stay up through every variant (what idles counts).

The push handler (``bench/push_handler.mjs``: the client's ``pushHandler`` + ``nodeListener`` on
``http.createServer``, a process of its own) serves ``bench.pdone@1``, registered as a push handler on its
loopback URL (``PARKWAY_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8`` for every child): a Celery worker that claims
its continuation hands it on to ``parkway.push``, whose task POSTs the item, signed, and commits the answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import seed
from bench.cases.common import Bench, CpuMeter, loadavg, park_many, ratio, wait_count
from bench.cases.httpapi import api_server
from bench.cases.latency import latency_parkway, paced
from bench.cases.throughput import run_parkway_throughput
from bench.harness import ROOT, free_port, log, proc_cpu_ms, spawn, stop_process
from bench.stats import percentile
from bench.workflows import DONE, TARGET
from models import store
from parkway.db import transaction
from parkway.tokens import hash_token

REMOTE_KEY = "bench.rdone@1"
PUSH_KEY = "bench.pdone@1"
AGENT = ROOT / "bench" / "remote_agent.mjs"
PUSH_HANDLER = ROOT / "bench" / "push_handler.mjs"
CLIENT_BUILT = ROOT / "clients" / "typescript" / "dist" / "index.js"
LEASE_ROUTES = ("/v1/worker/lease", "/v1/worker/leases/*/complete", "/v1/worker/leases/*/heartbeat")


@dataclass
class Agent:
    """A Node subprocess (the pull agent or the push handler) and what it counted (``stats()`` asks it, on
    SIGUSR2)."""

    proc: Any
    stats_path: Path

    def stats(self) -> dict[str, Any]:
        self.stats_path.unlink(missing_ok=True)
        os.kill(self.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 20
        while not self.stats_path.exists() or not self.stats_path.read_text().endswith("}"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Node agent wrote no stats (exit {self.proc.poll()})")
            time.sleep(0.02)
        return dict(json.loads(self.stats_path.read_text()))

    def cpu_ms(self) -> float:
        return proc_cpu_ms(self.proc.pid)


def worker_token() -> str:
    """A principal of kind ``worker`` granted on the bench target (it leases only runs on targets it is granted
    on, and completes them) and its token."""
    token = "pk_bench_worker_" + uuid.uuid4().hex
    with transaction() as session:
        worker = store.create_principal(session, kind="worker", name="bench-node", token_hash=hash_token(token))
        assert worker is not None, "a principal named bench-node exists already"
        store.create_grant(session, principal_id=worker.id, target=TARGET)
    return token


@contextmanager
def node_process(bench: Bench, script: Path, name: str, **extra: str) -> Iterator[Agent]:
    """Start ``node <script>`` and wait until it printed "ready"; its stats go to ``<name>-stats.json``."""
    if not CLIENT_BUILT.exists():
        raise RuntimeError(f"{CLIENT_BUILT.relative_to(ROOT)} is missing: make clients/typescript/.built first")
    out = bench.services.out_dir / "logs"
    stats_path = out / f"{name}-stats.json"
    log_path = out / f"{name}.log"
    proc = spawn(["node", str(script)], env=bench.services.child_env(BENCH_STATS=str(stats_path), **extra),
                 log_path=log_path)  # fmt: skip
    try:
        wait_count(lambda: int("ready" in log_path.read_text(errors="replace")) if log_path.exists() else 0,
                   1, timeout=60, what=f"the {name} to be ready", services=bench.services)  # fmt: skip
        yield Agent(proc, stats_path)
    finally:
        stop_process(proc, grace_s=10)


def node_agent(bench: Bench, base_url: str) -> contextlib.AbstractContextManager[Agent]:
    """``node bench/remote_agent.mjs``, ready once its first lease call advertised the key."""
    return node_process(bench, AGENT, "remote-agent", PARKWAY_URL=base_url, PARKWAY_TOKEN=worker_token(),
                        BENCH_KEY=REMOTE_KEY, BENCH_CONCURRENCY=str(bench.args.remote_concurrency))  # fmt: skip


def push_handler(bench: Bench) -> contextlib.AbstractContextManager[Agent]:
    """``node bench/push_handler.mjs`` on a free loopback port, registered (as ``POST /v1/handlers`` does)
    as the push handler of ``bench.pdone@1`` before anything parks on it."""
    from models import webhooks
    from parkway.crypto import seal
    from parkway.settings import get_settings

    port = free_port()
    secret = webhooks.new_secret()
    with transaction() as session:
        store.create_handler(
            session,
            url=f"http://127.0.0.1:{port}/",
            serves=[PUSH_KEY],
            secret_sealed=seal(secret),
            live_s=get_settings().push_live_s,
        )
    return node_process(bench, PUSH_HANDLER, "push-handler", BENCH_PORT=str(port), BENCH_SECRET=secret,
                        BENCH_KEY=PUSH_KEY)  # fmt: skip


def counted(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The agent's HTTP requests by route, its lease calls and the items they brought, and the items its
    completions' answers brought (``chained``), between two ``stats()``."""
    routes = set(before["requests"]) | set(after["requests"])
    out = {r: after["requests"].get(r, 0) - before["requests"].get(r, 0) for r in routes}
    for key in ("calls", "items", "empty", "chained"):
        out[f"lease {key}"] = after["leased"].get(key, 0) - before["leased"].get(key, 0)  # the push handler: none
    return out


@dataclass
class Consumers:
    """The Node processes beside the Celery workers: the pull agent and the push handler."""

    pull: Agent
    push: Agent

    def of(self, variant: str) -> Agent | None:
        return {"pull": self.pull, "push": self.push}.get(variant)

    def cpu_ms(self) -> dict[str, float]:
        return {"agent": self.pull.cpu_ms(), "handler": self.push.cpu_ms()}


VARIANTS = ("python", "pull", "push")
KEYS = {"python": DONE, "pull": REMOTE_KEY, "push": PUSH_KEY}
LABELS = {
    "python": "Python path (Celery -c 2)",
    "pull": "pull agent (Node worker())",
    "push": "push handler (Node pushHandler)",
}
PARTS = ("workers", "postgres", "api", "agent", "handler", "producer")


def throughput_reps(bench: Bench, nodes: Consumers, rep: int) -> None:
    """One rep: the Python path, the pull agent and the push handler, each on N fresh parked steps, in an
    order rotating by rep."""
    n = bench.args.n
    rates: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for variant in VARIANTS[rep % 3 :] + VARIANTS[: rep % 3]:
        node = nodes.of(variant)
        before, node_ms = (node.stats() if node else {}), nodes.cpu_ms()
        with CpuMeter(bench) as meter:
            rates[variant], _ = run_parkway_throughput(bench, n, http_base=None, continuation=KEYS[variant],
                                                       label=variant)  # fmt: skip
        per = meter.per_unit(n)
        for part, ms in nodes.cpu_ms().items():
            per[part] = (ms - node_ms[part]) / n
            per["total"] += per[part]
        cpus[variant] = per["total"]
        requests = counted(before, node.stats()) if node else {}
        bench.record("remote", {"variant": variant, "rep": rep, "per_s": rates[variant], "cpu": per,
                                "node_requests": requests, "load": loadavg()})  # fmt: skip
        label = LABELS[variant]
        bench.metric("remote", f"{label}: completions/s", "/s").add(rates[variant])
        for kind in ("total", *PARTS):
            bench.metric("remote", f"{label}: CPU per completion, {kind}", "ms").add(per[kind])
        line = ", ".join(f"{k} {per[k]:.1f}" for k in PARTS)
        log(f"    {variant:6}: {rates[variant]:7.0f} /s; CPU per completion {per['total']:.1f} ms ({line})")
        if variant == "pull":
            trips = sum(requests.get(r, 0) for r in LEASE_ROUTES)
            bench.metric("remote", "pull: HTTP requests per completion", "").add(trips / n)
            bench.metric("remote", "pull: items per lease call", "").add(
                requests["lease items"] / max(1, requests["lease calls"])
            )
            bench.metric("remote", "pull: share of items handed out by a completion's answer", "").add(
                requests["lease chained"] / n
            )
            log(f"    pull requests: {json.dumps(requests)} ({trips / n:.2f} per completion)")
        if variant == "push":
            posts = {r: v for r, v in requests.items() if r.startswith("push ")}  # by status answered
            bench.metric("remote", "push: POSTs per completion", "").add(sum(posts.values()) / n)
            log(f"    push POSTs answered: {json.dumps(posts)}")
    for variant in ("pull", "push"):
        bench.metric("remote", f"ratio {variant} ÷ Python path, completions/s", "x", ">= 0.5").add(
            ratio(rates[variant], rates["python"])
        )
        bench.metric("remote", f"ratio {variant} ÷ Python path, CPU per completion", "x").add(
            ratio(cpus[variant], cpus["python"])
        )


def latency_node(bench: Bench, node: Agent, key: str, count: int, rate: float) -> list[float]:
    """Answers at ``rate``/s, open loop: answer returned → the Node handler started, ms."""
    from tasks import sdk

    parked = park_many(bench, count, continuation=key)
    node.stats()  # forget the starts before these
    returned: dict[str, float] = {}

    def answer(p: seed.Parked) -> None:
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
        returned[p.step_id] = time.time()

    paced(parked, rate, answer, bench.args.threads)
    started: dict[str, float] = {}

    def seen() -> int:
        for line in node.stats()["starts"]:
            step_id, _, at = line.partition(" ")
            started[step_id] = float(at)
        return len(started)

    wait_count(seen, count, timeout=max(120, count / 5), what=f"{key} handler starts", services=bench.services,
               poll=0.5)  # fmt: skip
    return [(started[p.step_id] - returned[p.step_id]) * 1000 for p in parked]


def latency_reps(bench: Bench, nodes: Consumers, rep: int, count: int, rate: float) -> None:
    """One rep of answer → handler start, the three variants in an order rotating by rep."""
    for variant in VARIANTS[rep % 3 :] + VARIANTS[: rep % 3]:
        node = nodes.of(variant)
        if node is None:
            values = latency_parkway(bench, count, rate)["return_to_start"]
        else:
            values = latency_node(bench, node, KEYS[variant], count, rate)
        for q in (50, 99):
            bench.metric("remote", f"{LABELS[variant]}: answer → handler start p{q} @{rate:g}/s", "ms").add(
                percentile(values, q)
            )
        log(f"    {variant:6} →start p50/p99: {percentile(values, 50):.1f}/{percentile(values, 99):.1f} ms")


def case_remote(bench: Bench) -> None:
    args = bench.args
    log(f"== remote: N={args.n}, {args.reps} reps; Celery -c 2 (on parkway.push too) beside a Node pull agent "
        f"(concurrency {args.remote_concurrency}) and a Node push handler")  # fmt: skip
    bench.services.env.setdefault("PARKWAY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")  # the push handler's address
    bench.services.start_worker()
    with api_server(bench) as base_url:
        if base_url is None:
            bench.skipped["remote"] = bench.skipped.pop("throughput.http", "the API did not start")
            return
        with node_agent(bench, base_url) as pull, push_handler(bench) as push:
            nodes = Consumers(pull, push)
            for rep in range(args.reps):
                log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
                throughput_reps(bench, nodes, rep)
            capacity = [v for variant in ("pull", "push")
                        for v in bench.metrics[("remote", f"{LABELS[variant]}: completions/s")].values]  # fmt: skip
            rate = min(args.latency_rate, max(5.0, round(0.5 * min(capacity))))
            count = max(100, int(rate * args.latency_seconds))
            log(f"  answer → handler start at {rate:g}/s ({count} answers; half the slowest remote rate)")
            for rep in range(args.reps):
                log(f"  latency rep {rep + 1}/{args.reps} (load {loadavg()})")
                latency_reps(bench, nodes, rep, count, rate)
    bench.services.stop_workers()
