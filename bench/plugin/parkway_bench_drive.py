"""The answering process of the A/B bench, run with one tree's own Python, cwd and ``PYTHONPATH``.

It drives Parkway only through its public entry points: ``tasks.sdk.start_run`` and ``tasks.sdk.answer``
in-process, the HTTP API (``GET /v1/interactions``, ``POST …/answer``, ``GET /v1/runs/{id}``) over
keep-alive connections. Commands arrive as JSON lines on stdin; each reply is one line on stdout starting
with ``@@ `` (anything else a tree prints there is ignored). Its own CPU is in each reply.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from typing import Any

from parkway_bench_flows import ASK, STARTED_KEY, TARGET, started_list
from parkway_bench_http import KeepAliveClient

from tasks import sdk

AGENT = os.environ["ABBENCH_AGENT"]
HUMAN = os.environ["ABBENCH_HUMAN"]
TOKEN = os.environ["ABBENCH_TOKEN"]
API = os.environ["ABBENCH_API_PORT"]


class Http(KeepAliveClient):
    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = self.request(method, path, body)
        return status, json.loads(raw) if raw else None


HTTP = Http("127.0.0.1", int(API), token=TOKEN)
parked: list[tuple[str, str]] = []  # (interaction id, run id) of the runs waiting now


def cpu_ms() -> float:
    t = os.times()
    return (t.user + t.system) * 1000


def pending() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    path = f"/v1/interactions?status=pending&target={TARGET}"
    while True:
        status, body = HTTP.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status} {body}")
        found += [(item["id"], item["run_id"]) for item in body["items"]]
        if not body.get("next"):
            return found
        path = f"/v1/interactions?status=pending&target={TARGET}&cursor={body['next']}"


def in_threads(items: list[Any], fn: Any, threads: int) -> list[str]:
    errors: list[str] = []

    def work(chunk: list[Any]) -> None:
        for item in chunk:
            try:
                fn(item)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=work, args=(items[i::threads],)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return errors


def park(n: int, threads: int) -> dict[str, Any]:
    """``n`` new runs, each parked on its question (the worker runs the first steps)."""
    t0 = time.time()
    errors = in_threads(list(range(n)), lambda _: sdk.start_run(ASK, {}, principal=AGENT, target=TARGET), threads)
    if errors:
        raise RuntimeError(f"start_run failed {len(errors)} times, e.g. {errors[0]}")
    deadline = time.monotonic() + max(120.0, n / 5)
    while len(found := pending()) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(found)}/{n} runs parked")
        time.sleep(0.2)
    parked[:] = found
    started_list().delete(STARTED_KEY)
    return {"parked": len(found), "seconds": time.time() - t0}


def answer_one(mode: str, interaction_id: str) -> None:
    if mode == "python":
        sdk.answer(interaction_id, "yes", response_id=uuid.uuid4().hex, principal=HUMAN)
        return
    body = {"response_id": uuid.uuid4().hex, "value": "yes"}
    status, reply = HTTP.call("POST", f"/v1/interactions/{interaction_id}/answer", body)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {str(reply)[:200]}")


def wait_done(n: int, timeout: float) -> float:
    """When every answered run has committed: all ``n`` bodies started, and the last few of them (each
    worker child commits its earlier bodies before it starts the next) are ``completed``."""
    deadline = time.monotonic() + timeout
    client = started_list()
    while client.llen(STARTED_KEY) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {client.llen(STARTED_KEY)}/{n} continuations started")
        time.sleep(0.01)
    last = [entry.decode().split()[0] for entry in client.lrange(STARTED_KEY, -8, -1)]
    for run_id in last:
        while (run := HTTP.call("GET", f"/v1/runs/{run_id}")[1])["status"] != "completed":
            if time.monotonic() > deadline or run["status"] in ("failed", "interrupted", "canceled"):
                raise RuntimeError(f"run {run_id} is {run['status']}")
            time.sleep(0.005)
    return time.time()


def answer_all(mode: str, threads: int) -> dict[str, Any]:
    n, cpu0, t0 = len(parked), cpu_ms(), time.time()
    errors = in_threads([iid for iid, _ in parked], lambda iid: answer_one(mode, iid), threads)
    t_answered = time.time()
    t1 = wait_done(n - len(errors), timeout=max(300.0, n / 2))
    cpu1 = cpu_ms()
    parked.clear()
    return {
        "n": n,
        "seconds": t1 - t0,
        "per_s": (n - len(errors)) / (t1 - t0),
        "answers_per_s": n / (t_answered - t0),
        "cpu_ms": cpu1 - cpu0,
        "errors": errors[:3],
        "error_count": len(errors),
    }


def latency(rate: float) -> dict[str, Any]:
    """Answers paced at ``rate``/s from one thread: answer returned (committed, published) → body start."""
    answered: dict[str, float] = {}
    t0 = time.time()
    for i, (iid, run_id) in enumerate(parked):
        wait = t0 + i / rate - time.time()
        if wait > 0:
            time.sleep(wait)
        answer_one("python", iid)
        answered[run_id] = time.time()
    behind = time.time() - (t0 + (len(parked) - 1) / rate)
    wait_done(len(parked), timeout=120.0)
    started = dict(e.decode().split() for e in started_list().lrange(STARTED_KEY, 0, -1))
    lat = sorted((float(started[r]) - t) * 1000 for r, t in answered.items() if r in started)
    parked.clear()
    return {"n": len(lat), "latencies_ms": lat, "behind_s": behind}


def main() -> None:
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "park":
                reply = park(cmd["n"], cmd.get("threads", 4))
            elif cmd["cmd"] == "answer":
                reply = answer_all(cmd["mode"], cmd["threads"])
            elif cmd["cmd"] == "latency":
                reply = latency(cmd["rate"])
            elif cmd["cmd"] == "quit":
                return
            else:
                reply = {"error": f"unknown command {cmd['cmd']}"}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print("@@ " + json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
