"""A real ``celery flower`` subprocess for the deploy tests, and the command docker-compose.yml must match."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import PROBE, ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Flower's wait for inspect replies (ms). Its default (1 s) drops replies of a loaded worker; an inspect
# of one named worker returns as soon as that worker replies, so a long wait costs nothing when it is quick.
INSPECT_TIMEOUT_MS = 10000


def flower_command(port: int, basic_auth: str) -> list[str]:
    """The Flower the suite runs; docker-compose.yml's ``flower`` service must run the same entry point."""
    return [
        sys.executable, "-m", "celery", "-A", "tasks.celery_app:app", "flower",
        f"--port={port}", "--address=127.0.0.1", f"--basic-auth={basic_auth}", "--persistent=False",
        f"--inspect_timeout={INSPECT_TIMEOUT_MS}",
    ]  # fmt: skip


@dataclass
class Flower:
    """Flower in a process group of its own, and an HTTP client for its API."""

    proc: subprocess.Popen[bytes]
    log: Path
    url: str
    auth: tuple[str, str]

    @classmethod
    def start(cls, *, env: dict[str, str], log: Path, auth: tuple[str, str]) -> Flower:
        port = free_port()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                flower_command(port, ":".join(auth)),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(proc=proc, log=log, url=f"http://127.0.0.1:{port}", auth=auth)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def get(
        self,
        path: str,
        *,
        auth: tuple[str, str] | None = None,
        anonymous: bool = False,
        timeout: float = 10,
        **params: Any,
    ) -> httpx.Response:
        """GET with Flower's credentials, others (``auth``), or none at all (``anonymous``)."""
        credentials = None if anonymous else auth or self.auth
        return PROBE.get(f"{self.url}{path}", auth=credentials, params=params, timeout=timeout)

    def api(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def answers(self) -> bool:
        """``/healthcheck`` answers; raises if Flower died instead."""
        if self.proc.poll() is not None:
            raise AssertionError(f"flower exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
        try:
            return self.get("/healthcheck", anonymous=True).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """SIGTERM (Flower exits on it), SIGKILL the process group if it lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


def unbind_stopped_event_receivers(broker_folder: Path) -> None:
    """Drop the event queue a stopped Flower left bound on kombu's filesystem transport.

    That transport keeps exchange bindings in ``control/<exchange>.exchange`` files and nobody unbinds a
    stopped receiver: every later task event would be written, unread, into the queue folder the workers
    list on each poll. Only Flower receives events in this suite, so every ``celeryev`` binding is its own.
    """
    table = broker_folder / "control" / "celeryev.exchange"
    if not table.exists():
        return
    with open(table, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # the lock the transport itself takes on the table
        queues = [row[2] for row in json.loads(handle.read() or "[]")]
        handle.seek(0)
        handle.write("[]")
        handle.truncate()
    for queue in queues:
        for message in (broker_folder / "queue").glob(f"*.{queue}.msg"):
            message.unlink(missing_ok=True)
