"""The API subprocess (``uvicorn api.app:app``) and the lean HTTP client the throughput and anatomy
cases answer through."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cases.common import Bench
from bench.harness import (
    ROOT,
    free_port,
    spawn,
    stop_process,
)
from bench.plugin.parkway_bench_http import KeepAliveClient


@contextlib.contextmanager
def api_server(bench: Bench, *, profile: Path | None = None, tree: Path = ROOT) -> Iterator[str | None]:
    """Start ``uvicorn api.app:app``; yields its base URL, or ``None`` (reason in ``bench.skipped``).
    ``profile``: under ``bench.apiprofile``, its pstats written there when the server stops. ``tree``: the
    source tree it serves (another checkout: its code, with this interpreter and its packages)."""
    import importlib.util

    if importlib.util.find_spec("api.app") is None:
        bench.skipped["throughput.http"] = "api.app is not importable"
        yield None
        return
    port = free_port()
    log_path = bench.services.out_dir / "logs" / ("api.log" if tree == ROOT else f"api-{tree.name}.log")
    server = ["bench.apiprofile", str(profile)] if profile is not None else ["uvicorn"]
    cmd = [
        sys.executable, "-m", *server, "api.app:app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    proc = spawn(cmd, env=bench.services.child_env(PYTHONPATH=str(tree)), log_path=log_path, cwd=tree)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    ready = True
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        if not ready:
            tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
            why = f"exited with {proc.returncode}" if proc.poll() is not None else "not ready in 60 s"
            bench.skipped["throughput.http"] = f"uvicorn api.app:app {why}: {tail.strip()[-600:]}"
            yield None
            return
        bench.api_pid = proc.pid
        yield base
    finally:
        bench.api_pid = None
        stop_process(proc, grace_s=10)


class LeanHttpClient(KeepAliveClient):
    """The HTTP variant's client (``bench/plugin/parkway_bench_http.py``, shared with the A/B driver)."""

    def __init__(self, base_url: str, *, token: str) -> None:
        import urllib.parse

        parsed = urllib.parse.urlsplit(base_url)
        super().__init__(parsed.hostname or "127.0.0.1", parsed.port or 80, token=token)

    def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        status, raw = self.request("POST", path, body)
        return status, raw.decode(errors="replace")
