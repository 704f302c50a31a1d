"""The API subprocess (``uvicorn api.app:app``) and the lean HTTP client the throughput and anatomy
cases answer through."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench.cases.common import Bench
from bench.harness import (
    free_port,
    spawn,
    stop_process,
)


@contextlib.contextmanager
def api_server(bench: Bench) -> Iterator[str | None]:
    """Start ``uvicorn api.app:app``; yields its base URL, or ``None`` (reason in ``bench.skipped``)."""
    import importlib.util

    if importlib.util.find_spec("api.app") is None:
        bench.skipped["throughput.http"] = "api.app is not importable"
        yield None
        return
    port = free_port()
    log_path = bench.services.out_dir / "logs" / "api.log"
    cmd = [
        sys.executable, "-m", "uvicorn", "api.app:app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    proc = spawn(cmd, env=bench.services.child_env(), log_path=log_path)
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


class LeanHttpClient:
    """The HTTP variant's client: one keep-alive ``http.client`` connection per producer thread, JSON
    bodies. The client runs on the same two cores as the API, the workers and PostgreSQL, so its own CPU
    is part of the figure: httpx spent 0.8-1.0 ms of it per request, this 0.2-0.26 ms (measured against
    /healthz on this machine). A connection the server closed is opened again once, for that request."""

    def __init__(self, base_url: str, *, token: str) -> None:
        import urllib.parse

        parsed = urllib.parse.urlsplit(base_url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.local = threading.local()
        self.opened: list[Any] = []

    def _connection(self) -> Any:
        import http.client

        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.opened.append(conn)
        return conn

    def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        import http.client
        import json

        data = json.dumps(body).encode()
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request("POST", path, body=data, headers=self.headers)
                response = conn.getresponse()
                return response.status, response.read().decode(errors="replace")
            except (http.client.RemoteDisconnected, ConnectionError, http.client.CannotSendRequest):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conn in self.opened:
            conn.close()
