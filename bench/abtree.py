"""One Parkway tree under the A/B bench, and the bare baseline beside it: their databases, workers, API
and answering process, each started from that tree's own virtualenv and working directory.

A tree is driven only through its public entry points (``parkway migrate``, ``parkway token create`` for
an admin, ``POST /v1/principals`` and ``/v1/grants``, ``celery -A tasks.celery_app:app worker``,
``uvicorn api.app:app`` and the driver in ``bench/plugin``, which uses ``tasks.sdk`` and the HTTP API), so a
tree whose store was rewritten runs the same bench.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import ROOT, Worker, children_of, log

PLUGIN = ROOT / "bench" / "plugin"
WORKER_FLAGS = ["-P", "prefork", "-c", "2", "--without-gossip", "--without-mingle", "--without-heartbeat"]
PARKWAY_QUEUES = "parkway.steps,parkway.continuations,parkway.sweep"
AGENT, HUMAN = "abbench-agent", "abbench-human"
TARGET = "team:abbench"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Parkway or virtualenv setting, plus ``extra``."""
    drop = ("PARKWAY_", "BENCH_", "ABBENCH_", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_worker(cmd: list[str], *, env: dict[str, str], cwd: Path, name: str, out_dir: Path) -> Worker:
    log_path = out_dir / "logs" / f"{name}.log"
    import signal

    proc = harness.spawn(cmd, env=env, log_path=log_path, on_parent_death=signal.SIGTERM, cwd=cwd)
    worker = Worker(proc=proc, log_path=log_path, name=name)
    worker.wait_ready(timeout=120)
    return worker


def wait_http(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 90.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
    raise RuntimeError(f"{url} not ready (rc {proc.poll()}): {tail}")


def make_actors(base: str, admin_token: str) -> str:
    """The agent and the human, granted on the bench's target, made through the API; the human's token."""
    import httpx

    headers = {"Authorization": f"Bearer {admin_token}"}
    tokens = {}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for kind, name in (("agent", AGENT), ("human", HUMAN)):
            made = client.post("/v1/principals", json={"kind": kind, "name": name})
            if made.status_code != 201:
                raise RuntimeError(f"POST /v1/principals {name}: {made.status_code} {made.text[:300]}")
            tokens[name] = made.json()["token"]
            grant = client.post("/v1/grants", json={"principal": name, "target": TARGET})
            if grant.status_code != 201:
                raise RuntimeError(f"POST /v1/grants {name}: {grant.status_code} {grant.text[:300]}")
    return str(tokens[HUMAN])


@dataclass
class Tree:
    """A checkout with its own ``.venv``: its database, broker index, worker, API and driver."""

    label: str
    path: Path
    index: int
    redis_url: str
    out_dir: Path
    worker: Worker | None = None
    api: subprocess.Popen[bytes] | None = None
    driver: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def db_name(self) -> str:
        return f"parkway_ab_{self.index}"

    def bin(self, name: str) -> str:
        return str(self.path / ".venv" / "bin" / name)

    def run_cli(self, *args: str) -> str:
        done = subprocess.run(
            [self.bin("parkway"), *args], cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.label}: parkway {' '.join(args)}: rc {done.returncode}: {done.stderr[-800:]}")
        return done.stdout.strip()

    def start(self) -> None:
        if not Path(self.bin("python")).exists():
            raise RuntimeError(f"{self.path} has no .venv (run `make .venv/.installed` there)")
        harness.create_database(self.db_name)
        home = self.out_dir / f"home-{self.index}"
        port = harness.free_port()
        self.env = clean_env(
            PARKWAY_DATABASE_URL=harness.database_url(self.db_name),
            PARKWAY_BROKER_URL=f"{self.redis_url}/{self.index}",
            PARKWAY_SECRET_KEY=harness.SECRET_KEY,
            PARKWAY_IMPORTS="parkway_bench_flows",
            PARKWAY_HOME=str(home),
            PARKWAY_WORKSPACE_DIR=str(home / "workspaces"),
            PYTHONPATH=f"{self.path}:{PLUGIN}",
            ABBENCH_AGENT=AGENT,
            ABBENCH_HUMAN=HUMAN,
            ABBENCH_API_PORT=str(port),
        )
        log(f"{self.label}: {self.path} (git {self.git()}), database {self.db_name}")
        self.run_cli("migrate")
        admin = self.run_cli("token", "create", "--kind", "admin", "--name", "abbench-admin").splitlines()[-1]
        celery = [self.bin("python"), "-m", "celery", "-A", "tasks.celery_app:app", "worker", "-l", "info"]
        cmd = [*celery, *WORKER_FLAGS, "-n", f"ab{self.index}@%h", "-Q", PARKWAY_QUEUES]
        self.worker = start_worker(cmd, env=self.env, cwd=self.path, name=f"ab{self.index}", out_dir=self.out_dir)
        api_log = self.out_dir / "logs" / f"api{self.index}.log"
        uvicorn = [self.bin("python"), "-m", "uvicorn", "api.app:app", "--host", "127.0.0.1", "--port", str(port)]
        uvicorn += ["--log-level", "warning", "--no-access-log"]
        self.api = harness.spawn(uvicorn, env=self.env, log_path=api_log, cwd=self.path)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/readyz", self.api, api_log)
        self.env["ABBENCH_TOKEN"] = make_actors(base, admin)
        driver = [self.bin("python"), str(PLUGIN / "parkway_bench_drive.py")]
        self.driver = harness.spawn(
            driver, env=self.env, log_path=self.out_dir / "logs" / f"driver{self.index}.log", cwd=self.path, pipes=True
        )

    def git(self) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return done.stdout.strip() or "?"

    def ask(self, **cmd: Any) -> dict[str, Any]:
        """One command to the driver; its reply (a failure raises, with the driver's log)."""
        assert self.driver is not None and self.driver.stdin is not None and self.driver.stdout is not None
        self.driver.stdin.write((json.dumps(cmd) + "\n").encode())
        self.driver.stdin.flush()
        while True:
            line = self.driver.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.label}: the driver exited (see logs/driver{self.index}.log)")
            if line.startswith(b"@@ "):
                reply: dict[str, Any] = json.loads(line[3:])
                if "error" in reply:
                    raise RuntimeError(f"{self.label}: {cmd['cmd']}: {reply['error']}")
                return reply

    def pids(self) -> dict[str, list[int]]:
        assert self.worker is not None and self.api is not None and self.driver is not None
        return {
            "worker": [self.worker.proc.pid, *children_of(self.worker.proc.pid)],
            "answering": [self.driver.pid],
            "api": [self.api.pid],
        }


@dataclass
class Bare:
    """The bare baseline: ``bench.bare``'s worker, its own database, this process as the producer."""

    redis_url: str
    out_dir: Path
    db_name: str = "parkway_ab_bare"
    worker: Worker | None = None

    def start(self) -> None:
        harness.create_database(self.db_name)
        url = harness.database_url(self.db_name).replace("postgresql+psycopg://", "postgresql://")
        os.environ["BENCH_BARE_BROKER_URL"] = f"{self.redis_url}/0"
        os.environ["BENCH_BARE_DATABASE_URL"] = url
        env = clean_env(BENCH_BARE_BROKER_URL=f"{self.redis_url}/0", BENCH_BARE_DATABASE_URL=url, PYTHONPATH=str(ROOT))
        from bench import bare

        with bare.connection().transaction():
            bare.connection().execute(bare.TABLE_DDL)
            bare.connection().execute(bare.WAIT_DDL)
        celery = [sys.executable, "-m", "celery", "-A", "bench.bare:app", "worker", "-l", "info"]
        cmd = [*celery, *WORKER_FLAGS, "-n", "bare@%h", "-Q", bare.QUEUE]
        self.worker = start_worker(cmd, env=env, cwd=ROOT, name="bare", out_dir=self.out_dir)

    def pids(self) -> dict[str, list[int]]:
        assert self.worker is not None
        return {"worker": [self.worker.proc.pid, *children_of(self.worker.proc.pid)], "answering": [os.getpid()]}
