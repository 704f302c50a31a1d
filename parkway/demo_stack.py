"""The stack ``parkway demo`` drives: its settings, its processes (started, watched, killed), its HTTP client,
what it reads of the database that HTTP does not show, and the principals it makes."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from parkway import valkey
from parkway.children import QUEUES, Child, child_environment, http_ok, stop_children
from parkway.demo_narrator import DemoFailed, Narrator, wait_until

# Kept in step with parkway.demo_workflows, which is not imported here: importing the SDK configures the
# Celery app from the settings of the moment, and this process only knows its home once the demo starts.
TARGET = "team:ops"
EFFECTS_TABLE = "parkway_demo_effects"
TOOL, COMMITTED = "tool", "committed"
CRASH_POINT = "resume.before_commit"
DEMO_SETTINGS = {
    "PARKWAY_IMPORTS": "parkway.demo_workflows",
    "PARKWAY_CLAIM_LEASE_S": "2",
    "PARKWAY_REENQUEUE_AFTER_S": "1",
    "PARKWAY_SWEEP_INTERVAL_S": "1",
    "PARKWAY_MAX_ATTEMPTS": "5",
}
AGENT, HUMAN, ADMIN = "demo-agent", "demo-ana", "demo-admin"
STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def demo_environment(home: Path) -> Iterator[dict[str, str]]:
    """This process and its children on a fresh embedded home: no configured database, broker or key."""
    saved = dict(os.environ)
    env = {k: v for k, v in child_environment().items() if not k.startswith("PARKWAY_")}
    env.update(DEMO_SETTINGS, PARKWAY_HOME=str(home), PARKWAY_WORKSPACE_DIR=str(home / "workspaces"))
    os.environ.clear()
    os.environ.update(env)
    _reset()
    try:
        yield env
    finally:
        _reset()
        os.environ.clear()
        os.environ.update(saved)


def _reset() -> None:
    from parkway.db import reset_engine
    from parkway.settings import reset_settings

    reset_settings()
    reset_engine()


class DemoStack:
    """The demo's processes, its HTTP client, what it reads of the database, and its principals."""

    def __init__(self, home: Path, env: dict[str, str], narrator: Narrator, *, verbose: bool) -> None:
        self.home, self.env, self.n = home, env, narrator
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.verbose = verbose
        self.children: list[Child] = []
        self.serial = itertools.count(1)
        self.http = httpx.Client(base_url=self.url, timeout=15)
        self.tokens: dict[str, str] = {}
        self.marks: list[tuple[datetime, str]] = []

    # ----------------------------------------------------------------- processes

    def start(self, role: str, *, crash_at: str | None = None) -> Child:
        py = sys.executable
        celery = [py, "-m", "parkway.cli_celery", "-A", "tasks.celery_app:app"]  # as parkway up starts it
        number = next(self.serial)
        if role == "api":
            cmd = [py, "-m", "uvicorn", "api.app:app", "--host", "127.0.0.1", "--port", str(self.port),
                   "--timeout-graceful-shutdown", "2"]  # fmt: skip
        elif role == "worker":
            cmd = [*celery, "worker", "-l", "info", "-P", "solo", "-n", f"demo{number}@%h", "-Q", QUEUES,
                   "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        else:
            cmd = [*celery, "beat", "-l", "info", "-s", str(self.home / "celerybeat-schedule")]
        env = dict(self.env)
        if crash_at:
            env["PARKWAY_CRASH_AT"] = crash_at
        child = Child(
            role,
            cmd,
            env,
            watch=[" ready.", "beat: Starting", f"crash point {CRASH_POINT} reached"],
            log=self.logs / f"{number:02d}-{role}.log",
            relay=sys.stderr if self.verbose else None,
        ).start()
        self.children.append(child)
        return child

    def start_broker(self) -> str:
        """The embedded Valkey of the demo's home, answering before the others start; or, on a platform
        without it, nothing to start (the filesystem broker). Says which."""
        if not valkey.available():
            return "the filesystem broker (no embedded Valkey on this platform)"
        broker = Child("broker", valkey.command(self.home), self.env, log=self.logs / "00-broker.log").start()
        self.children.append(broker)
        valkey.wait_until_answers(self.home, broker.alive)
        problem = valkey.problem(self.home)
        self.n.require(problem is None, f"broker (pid {broker.pid}) answers", failure=[problem or ""],
                       label=f"the {valkey.describe(self.home)} answers")  # fmt: skip
        return f"broker (pid {broker.pid}) on {valkey.describe(self.home)}"

    def ready(self, child: Child) -> bool:
        if child.name == "api":
            return http_ok(f"{self.url}/healthz")
        marker = " ready." if child.name == "worker" else "beat: Starting"
        return marker in child.seen

    def wait_ready(self, *children: Child, label: str) -> None:
        def all_ready() -> bool:
            for child in children:
                if not child.alive():
                    raise DemoFailed(f"{child.name} (pid {child.pid}) exited with {child.returncode} while starting")
            return all(self.ready(c) for c in children)

        names = ", ".join(f"{c.name} (pid {c.pid})" for c in children)
        try:
            ready = wait_until(all_ready, STARTUP_TIMEOUT_S, interval=0.1)
        except DemoFailed as exc:
            self.n.require(False, str(exc), label=label)
        text = f"{names} ready" if ready else f"{names}: not ready after {STARTUP_TIMEOUT_S:g}s"
        self.n.require(bool(ready), text, label=label)

    def stop_all(self) -> None:
        """Every process, the broker last (a worker's warm shutdown still talks to it)."""
        for last in (False, True):
            group = [c for c in self.children if c.alive() and (c.name == "broker") == last]
            stop_children(group, grace_s=10, say=lambda _: None)
        for child in self.children:
            if child.group_alive():
                child.kill_group()

    def tails(self) -> None:
        """On failure: the last lines of every process that ran."""
        for child in self.children:
            if child.log is not None and child.log.exists():
                lines = child.log.read_text(errors="replace").splitlines()[-12:]
                self.n.line(f"--- {child.log} (pid {child.pid}, exit {child.returncode})")
                for line in lines:
                    self.n.line(f"    {line[:200]}")

    def mark(self, text: str) -> None:
        """A moment of the story that the run's event log cannot show (processes dying and starting)."""
        self.marks.append((datetime.now(UTC), text))

    # ----------------------------------------------------------------- HTTP

    def call(
        self, method: str, path: str, who: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = {**(headers or {}), "Authorization": f"Bearer {self.tokens[who]}"}
        return self.http.request(method, path, headers=headers, **kwargs)

    def run_view(self, run_id: str) -> dict[str, Any]:
        response = self.call("GET", f"/v1/runs/{run_id}", HUMAN)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        response = self.call("GET", "/v1/interactions", HUMAN, params={"status": "pending", "run_id": run_id})
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()["items"]
        return sorted(items, key=lambda i: str(i["key"]))

    def events(self, run_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = {"cursor": cursor} if cursor else {"after": 0}
            response = self.call("GET", f"/v1/runs/{run_id}/events", HUMAN, params=params)
            response.raise_for_status()
            page = response.json()
            items += page["items"]
            cursor = page.get("next")
            if not cursor or not page["items"]:
                return items

    # ----------------------------------------------------------------- database (what HTTP does not show)

    def effects(self, run_id: str) -> dict[str, int]:
        from sqlalchemy import text

        from parkway.db import transaction

        with transaction() as session:
            rows = session.execute(
                text(f"SELECT kind, COUNT(*) FROM {EFFECTS_TABLE} WHERE run_id = :r GROUP BY kind"), {"r": run_id}
            ).all()
        counts = {TOOL: 0, COMMITTED: 0}
        counts.update({str(kind): int(n) for kind, n in rows})
        return counts

    def resume_continuation(self, run_id: str) -> dict[str, Any] | None:
        from sqlalchemy import select

        from models.status import ContinuationKind
        from models.tables import Continuation
        from parkway.db import transaction

        with transaction() as session:
            rows = session.scalars(
                select(Continuation).where(Continuation.run_id == run_id, Continuation.kind == ContinuationKind.RESUME)
            ).all()
            if len(rows) != 1:
                return None
            row = rows[0]
            return {"id": row.id, "status": row.status, "attempts": row.attempts, "name": row.name}

    def continuation_statuses(self, run_id: str) -> list[str]:
        from sqlalchemy import select

        from models.tables import Continuation
        from parkway.db import transaction

        with transaction() as session:
            return list(session.scalars(select(Continuation.status).where(Continuation.run_id == run_id)))

    def admin_token(self) -> None:
        """The first admin comes from the command line: `parkway token create` prints its token once."""
        admin = subprocess.run(
            [sys.executable, "-m", "parkway.cli", "token", "create", "--kind", "admin", "--name", ADMIN],
            env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        self.n.require(
            admin.returncode == 0 and admin.stdout.strip().startswith("pk_"),
            f"`parkway token create --kind admin --name {ADMIN}` printed a token",
            failure=admin.stderr.strip().splitlines()[-5:],
            label="admin token from `parkway token create`",
        )
        self.tokens[ADMIN] = admin.stdout.strip()

    def principals(self) -> None:
        """The agent, the human and their grants, made by the admin over HTTP."""
        n = self.n
        made = []
        for kind, name in (("agent", AGENT), ("human", HUMAN)):
            principal = self.call("POST", "/v1/principals", ADMIN, json={"kind": kind, "name": name})
            if principal.status_code == 201:
                self.tokens[name] = principal.json()["token"]
            grant = self.call("POST", "/v1/grants", ADMIN, json={"principal": name, "target": TARGET})
            made += [principal, grant]
        n.require(
            all(r.status_code == 201 for r in made),
            f"as {ADMIN}: POST /v1/principals agent {AGENT} and human {HUMAN}, POST /v1/grants {TARGET} for both "
            f"→ {', '.join(str(r.status_code) for r in made)}",
            failure=[r.text[:200] for r in made if r.status_code != 201],
            label="principals and grants made over HTTP",
        )

    def migrate(self) -> str:
        from sqlalchemy import text

        from parkway.db import get_engine, transaction
        from parkway.demo_workflows import EFFECTS_DDL
        from parkway.migrate import upgrade
        from parkway.settings import get_settings

        get_settings().resolved_secret_key()  # the embedded key file, made once, before any child reads it
        revision = upgrade(get_engine())
        with transaction() as session:
            session.execute(text(EFFECTS_DDL))
        return revision
