"""4. memory: the workers' peak RSS."""

from __future__ import annotations

from typing import Any

from bench.cases.common import Bench
from bench.harness import (
    log,
    proc_memory,
)


def worker_memory(bench: Bench) -> dict[str, Any]:
    out: dict[str, Any] = {"workers": []}
    for worker in bench.services.workers:
        children = {pid: proc_memory(pid) for pid in worker.pool_children()}
        out["workers"].append({"main_pid": worker.proc.pid, "main": proc_memory(worker.proc.pid), "children": children})
    return out


def case_memory(bench: Bench, when: str) -> None:
    snapshot = worker_memory(bench)
    bench.record("memory", {"when": when, **snapshot})
    peaks = [m.get("VmHWM", 0.0) for w in snapshot["workers"] for m in w["children"].values()]
    mains = [w["main"].get("VmHWM", 0.0) for w in snapshot["workers"]]
    if when == "after throughput":
        bench.metric("memory", "worker child peak RSS (VmHWM, max of pool)", "MB", "<= 150").add(
            max(peaks, default=None)
        )
        bench.metric("memory", "worker main process peak RSS", "MB").add(max(mains, default=None))
    else:
        bench.metric("memory", f"worker child peak RSS {when}", "MB").add(max(peaks, default=None))
    log(f"== memory {when}: pool children VmHWM {[round(p, 1) for p in peaks]} MB, main {mains} MB")
