"""Remote handlers (issue 33): answer → continuation consumed by a Node pull agent (the TypeScript client's
``worker()``, ``bench/remote_agent.mjs``) beside the same answers consumed by the Celery workers, in one run,
their order alternating by rep; CPU per completion of each, and answer → handler start at a steady rate.

The Python path is the throughput case's (``bench.done@1``, run by ``celery worker -c 2``). The agent serves
``bench.rdone@1``, which no Celery worker serves: a continuation on it is remote when the answer makes it due
(``models.store.workers.remote_only``) and only lease calls take it. Its body is ``bench.done``'s: complete
with the answer. The answers are the SDK's, made by this process as in the throughput case; the agent talks
to a ``uvicorn api.app:app`` of the case. Both consumers stay up through both variants (what idles counts).

The push mode (issue 33 §4) is not on this branch: no push variant.
"""

from __future__ import annotations

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
from bench.harness import ROOT, log, proc_cpu_ms, spawn, stop_process
from bench.stats import percentile
from bench.workflows import DONE
from models import store
from parkway.db import transaction
from parkway.tokens import hash_token

REMOTE_KEY = "bench.rdone@1"
AGENT = ROOT / "bench" / "remote_agent.mjs"
CLIENT_BUILT = ROOT / "clients" / "typescript" / "dist" / "index.js"
LEASE_ROUTES = ("/v1/worker/lease", "/v1/worker/leases/*/complete", "/v1/worker/leases/*/heartbeat")


@dataclass
class Agent:
    """The Node agent subprocess and what it counted (``stats()`` asks it, on SIGUSR2)."""

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
    """A principal of kind ``worker`` (it leases and completes; it holds no grant) and its token."""
    token = "pk_bench_worker_" + uuid.uuid4().hex
    with transaction() as session:
        store.create_principal(session, kind="worker", name="bench-node", token_hash=hash_token(token))
    return token


@contextmanager
def node_agent(bench: Bench, base_url: str) -> Iterator[Agent]:
    """Start ``node bench/remote_agent.mjs`` and wait until its first lease call advertised the key."""
    if not CLIENT_BUILT.exists():
        raise RuntimeError(f"{CLIENT_BUILT.relative_to(ROOT)} is missing: make clients/typescript/.built first")
    out = bench.services.out_dir / "logs"
    stats_path = out / "remote-agent-stats.json"
    env = bench.services.child_env(
        PARKWAY_URL=base_url, PARKWAY_TOKEN=worker_token(), BENCH_KEY=REMOTE_KEY,
        BENCH_CONCURRENCY=str(bench.args.remote_concurrency), BENCH_STATS=str(stats_path),
    )  # fmt: skip
    log_path = out / "remote-agent.log"
    proc = spawn(["node", str(AGENT)], env=env, log_path=log_path)
    try:
        wait_count(lambda: int("ready" in log_path.read_text(errors="replace")) if log_path.exists() else 0,
                   1, timeout=60, what="the Node agent's first lease", services=bench.services)  # fmt: skip
        yield Agent(proc, stats_path)
    finally:
        stop_process(proc, grace_s=10)


def counted(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The agent's HTTP requests by route, and its lease calls, between two ``stats()``."""
    routes = set(before["requests"]) | set(after["requests"])
    out = {r: after["requests"].get(r, 0) - before["requests"].get(r, 0) for r in routes}
    for key in ("calls", "items", "empty"):
        out[f"lease {key}"] = after["leased"][key] - before["leased"][key]
    return out


def throughput_pair(bench: Bench, agent: Agent, rep: int) -> None:
    """One rep: the Python path and the pull agent, each on N fresh parked steps, side by side."""
    n = bench.args.n
    rates: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for variant in ("python", "pull") if rep % 2 == 0 else ("pull", "python"):
        before, agent_ms = agent.stats(), agent.cpu_ms()
        with CpuMeter(bench) as meter:
            key = REMOTE_KEY if variant == "pull" else DONE
            rates[variant], _ = run_parkway_throughput(bench, n, http_base=None, continuation=key, label=variant)
        agent_per = (agent.cpu_ms() - agent_ms) / n
        per = meter.per_unit(n)
        per["agent"] = agent_per
        per["total"] += agent_per
        cpus[variant] = per["total"]
        requests = counted(before, agent.stats())
        bench.record("remote", {"variant": variant, "rep": rep, "per_s": rates[variant], "cpu": per,
                                "agent_requests": requests, "load": loadavg()})  # fmt: skip
        label = "Python path (Celery -c 2)" if variant == "python" else "pull agent (Node worker())"
        bench.metric("remote", f"{label}: completions/s", "/s").add(rates[variant])
        for kind in ("total", "workers", "postgres", "api", "agent", "producer"):
            bench.metric("remote", f"{label}: CPU per completion, {kind}", "ms").add(per[kind])
        line = ", ".join(f"{k} {per[k]:.1f}" for k in ("workers", "postgres", "api", "agent", "producer"))
        log(f"    {variant:6}: {rates[variant]:7.0f} /s; CPU per completion {per['total']:.1f} ms ({line})")
        if variant == "pull":
            trips = sum(requests.get(r, 0) for r in LEASE_ROUTES)
            bench.metric("remote", "pull: HTTP requests per completion", "").add(trips / n)
            bench.metric("remote", "pull: items per lease call", "").add(
                requests["lease items"] / max(1, requests["lease calls"])
            )
            log(f"    pull requests: {json.dumps(requests)} ({trips / n:.2f} per completion)")
    bench.metric("remote", "ratio pull ÷ Python path, completions/s", "x", ">= 0.5").add(
        ratio(rates["pull"], rates["python"])
    )
    bench.metric("remote", "ratio pull ÷ Python path, CPU per completion", "x").add(ratio(cpus["pull"], cpus["python"]))


def latency_pull(bench: Bench, agent: Agent, count: int, rate: float) -> list[float]:
    """Answers at ``rate``/s, open loop: answer returned → the agent's handler started, ms."""
    from tasks import sdk

    parked = park_many(bench, count, continuation=REMOTE_KEY)
    agent.stats()  # forget the starts before these
    returned: dict[str, float] = {}

    def answer(p: seed.Parked) -> None:
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
        returned[p.step_id] = time.time()

    paced(parked, rate, answer, bench.args.threads)
    started: dict[str, float] = {}

    def seen() -> int:
        for line in agent.stats()["starts"]:
            step_id, _, at = line.partition(" ")
            started[step_id] = float(at)
        return len(started)

    wait_count(seen, count, timeout=max(120, count / 5), what="pull handler starts", services=bench.services,
               poll=0.5)  # fmt: skip
    return [(started[p.step_id] - returned[p.step_id]) * 1000 for p in parked]


def case_remote(bench: Bench) -> None:
    args = bench.args
    log(f"== remote: N={args.n}, {args.reps} reps; Celery -c 2 beside a Node pull agent "
        f"(concurrency {args.remote_concurrency}); no push variant (not on this branch)")  # fmt: skip
    bench.skipped["remote.push"] = "the push mode (issue 33 §4) is not on this branch"
    bench.services.start_worker()
    with api_server(bench) as base_url:
        if base_url is None:
            bench.skipped["remote"] = bench.skipped.pop("throughput.http", "the API did not start")
            return
        with node_agent(bench, base_url) as agent:
            for rep in range(args.reps):
                log(f"  rep {rep + 1}/{args.reps} (load {loadavg()})")
                throughput_pair(bench, agent, rep)
            capacity = bench.metrics[("remote", "pull agent (Node worker()): completions/s")].values
            rate = min(args.latency_rate, max(5.0, round(0.5 * min(capacity))))
            count = max(100, int(rate * args.latency_seconds))
            log(f"  answer → handler start at {rate:g}/s ({count} answers; half the pull agent's slowest rate)")
            for rep in range(args.reps):
                if rep % 2:
                    python = latency_parkway(bench, count, rate)["return_to_start"]
                    pull = latency_pull(bench, agent, count, rate)
                else:
                    pull = latency_pull(bench, agent, count, rate)
                    python = latency_parkway(bench, count, rate)["return_to_start"]
                for label, values in (("pull agent", pull), ("Python path", python)):
                    for q in (50, 99):
                        bench.metric("remote", f"{label}: answer → handler start p{q} @{rate:g}/s", "ms").add(
                            percentile(values, q)
                        )
                log(f"    →start p50/p99: pull {percentile(pull, 50):.1f}/{percentile(pull, 99):.1f} ms, "
                    f"Python {percentile(python, 50):.1f}/{percentile(python, 99):.1f} ms")  # fmt: skip
    bench.services.stop_workers()
