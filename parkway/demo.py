"""``parkway demo``: the restart story with real processes, narrated as a timeline (issue 7, item 5).

On the embedded defaults (PostgreSQL + the filesystem broker) in a fresh temporary ``PARKWAY_HOME`` (never
``./var``): start the API, a worker and beat; park a run on a Permission and a Question over HTTP; SIGKILL
the worker and the API while it waits; restart them and show the same questions still pending; answer
them; let the resuming worker die at ``resume.before_commit``; restart it; show the continuation committed
exactly once. Every claim is a check (✓/✗); the exit code is 0 only if all of them held.

The children run with a short lease and sweep cadence so recovery takes seconds, not minutes. Workers use
Celery's solo pool: one process each, so what is killed is exactly what dies, and the crash point's exit
code (137) is the worker's own.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx

from parkway import embedded
from parkway.children import QUEUES, Child, child_environment, http_ok, stop_children, stop_signals

T = TypeVar("T")

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


class DemoFailed(Exception):
    """A check the rest of the story depends on did not hold."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop the children and leave."""


@dataclass
class Check:
    label: str
    ok: bool


class Narrator:
    """Prints the timeline (seconds since the start) and keeps the checks for the summary."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC)
        self.checks: list[Check] = []
        self.ok_mark, self.bad_mark = "✓", "✗"
        try:
            "✓✗…→─".encode(getattr(out, "encoding", None) or "ascii")
        except (UnicodeEncodeError, LookupError):
            self.ok_mark, self.bad_mark = "+", "x"
            reconfigure = getattr(out, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="replace")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def say(self, text: str, *details: str) -> None:
        self.line(f"{self.elapsed():6.1f}s    {text}")
        for detail in details:
            self.line(f"{'':12}{detail}")

    def check(self, ok: bool, text: str, *details: str, label: str = "", failure: Sequence[str] = ()) -> bool:
        """One claim of the story: a timeline line with ✓ or ✗, and a row of the summary (``label``)."""
        self.checks.append(Check(label=label or text, ok=bool(ok)))
        mark = self.ok_mark if ok else self.bad_mark
        self.line(f"{self.elapsed():6.1f}s  {mark} {text}")
        for detail in [*details, *([] if ok else failure)]:
            self.line(f"{'':12}{detail}")
        return bool(ok)

    def require(self, ok: bool, text: str, *details: str, label: str = "", failure: Sequence[str] = ()) -> None:
        """A check the rest of the story depends on: the demo stops when it does not hold."""
        if not self.check(ok, text, *details, label=label, failure=failure):
            raise DemoFailed(label or text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], T], timeout: float, interval: float = 0.1) -> T | None:
    """Poll until ``condition()`` is truthy (returned) or the timeout passes (``None``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def short(identifier: str) -> str:
    return identifier[:8] + "…" if len(identifier) > 9 else identifier


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


class Demo:
    """The stack's processes, an HTTP client, and the story."""

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
        celery = [py, "-m", "celery", "-A", "tasks.celery_app:app"]
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
        stop_children([c for c in self.children if c.alive()], grace_s=10, say=lambda _: None)
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

    # ----------------------------------------------------------------- the story

    def story(self) -> None:
        n = self.n
        revision = self.migrate()
        n.say(f"migrated a fresh database to revision {revision}; created table {EFFECTS_TABLE}")

        api, worker, beat = self.start("api"), self.start("worker"), self.start("beat")
        n.say(f"starting api (pid {api.pid}) on {self.url}, worker (pid {worker.pid}), beat (pid {beat.pid})")
        self.admin_token()  # while they start
        self.wait_ready(api, worker, beat, label="stack up: api answers /healthz, worker and beat ready")
        self.principals()

        body = {"workflow": "demo.deploy", "payload": {"service": "billing"}, "target": TARGET}
        started = self.call("POST", "/v1/runs", AGENT, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
        run_id = str(started.json().get("id")) if started.status_code == 201 else "?"
        n.require(
            started.status_code == 201,
            f"POST /v1/runs as {AGENT} → {started.status_code}: run {run_id}",
            json.dumps(body),
            failure=[started.text[:300]],
            label="run started over HTTP",
        )

        waiting = wait_until(lambda: self.run_view(run_id)["status"] == "waiting", 30)
        asked = self.pending(run_id) if waiting else []
        n.require(
            bool(waiting) and sorted(i["kind"] for i in asked) == ["permission", "question"],
            f"the run is waiting on {len(asked)} pending interactions (GET /v1/interactions?status=pending)",
            *(f"{i['kind']:<10} {i['key']:<7} {i['id']}  {i['prompt']!r}" for i in asked),
            label="run parked on a permission and a question",
        )
        ids = [i["id"] for i in asked]

        api.kill_group()
        worker.kill_group()
        n.say(f"SIGKILL worker (pid {worker.pid}) and api (pid {api.pid}) while the run waits; beat keeps running")
        self.mark("SIGKILL worker and api")
        n.require(
            api.returncode == -9 and worker.returncode == -9 and not api.group_alive() and not worker.group_alive(),
            f"both are gone (exit codes {api.returncode} and {worker.returncode})",
            label="worker and api killed while the run waits",
        )

        api = self.start("api")
        crashing = self.start("worker", crash_at=CRASH_POINT)
        n.say(f"restarting api (pid {api.pid}) and worker (pid {crashing.pid}), "
              f"the worker with PARKWAY_CRASH_AT={CRASH_POINT}")  # fmt: skip
        self.wait_ready(api, crashing, label="api and worker restarted")
        self.mark(f"api and worker restarted (the worker with PARKWAY_CRASH_AT={CRASH_POINT})")
        after = self.pending(run_id)
        status = self.run_view(run_id)["status"]
        n.require(
            [i["id"] for i in after] == ids and status == "waiting",
            f"the same {len(after)} interactions are still pending after the restart (same ids); run {status}",
            *(f"{i['key']:<7} {i['id']}  {i['status']}" for i in after),
            label="same questions pending after the restart (same ids, over HTTP)",
        )

        receipts: dict[str, tuple[dict[str, Any], Any]] = {}
        answered = []
        for item in after:
            value: Any = {"approved": True} if item["kind"] == "permission" else "now"
            payload = {"response_id": f"demo-{item['key']}", "value": value}
            response = self.call("POST", f"/v1/interactions/{item['id']}/answer", HUMAN, json=payload)
            receipt = response.json()
            n.say(f"POST /v1/interactions/{short(item['id'])}/answer {json.dumps(value)} as {HUMAN} "
                  f"→ {response.status_code} {receipt.get('status')}")  # fmt: skip
            receipts[item["id"]] = (receipt, payload)
            answered.append(response.status_code == 200 and receipt.get("status") == "answered")
        n.require(all(answered), "both answers committed (200 answered); the last one made the continuation due",
                  label="both answers accepted over HTTP")  # fmt: skip

        crashed = wait_until(lambda: not crashing.alive(), 30)
        crashing.wait_reader()
        n.require(
            bool(crashed) and crashing.returncode == 137 and f"crash point {CRASH_POINT} reached" in crashing.seen,
            f"the worker resuming the step ran its body, then died at {CRASH_POINT} (exit {crashing.returncode})",
            label=f"resuming worker died at {CRASH_POINT}",
        )
        self.mark(f"the worker died at {CRASH_POINT} (exit 137)")
        row = self.resume_continuation(run_id)
        effects = self.effects(run_id)
        status = self.run_view(run_id)["status"]
        n.require(
            row is not None and row["status"] == "claimed" and effects[COMMITTED] == 0 and status != "completed",
            f"nothing committed: run {status}; continuation {row and row['name']} {row and row['status']} "
            f"(attempt {row and row['attempts']}); committed effect rows: {effects[COMMITTED]}",
            f"(the deploy tool did run before the crash: {effects[TOOL]} tool effect row, journaled)",
            label="the crashed attempt committed nothing",
        )

        worker = self.start("worker")
        self.mark("worker started again, without the crash point")
        n.say(f"restarting the worker without the crash point (pid {worker.pid}); beat's sweep re-drives the "
              f"claimed continuation once its {DEMO_SETTINGS['PARKWAY_CLAIM_LEASE_S']}s lease expired")  # fmt: skip
        done = wait_until(lambda: self.run_view(run_id)["status"] in ("completed", "failed", "interrupted"), 40, 0.2)
        view = self.run_view(run_id)
        n.require(
            bool(done) and view["status"] == "completed",
            f"GET /v1/runs/{short(run_id)} → {view['status']}",
            f"result {json.dumps(view.get('result'))}",
            failure=[f"{k}: {view[k]}" for k in ("error", "reason") if view.get(k)],
            label="run completed after the restart",
        )

        row = self.resume_continuation(run_id)
        effects = self.effects(run_id)
        events = self.events(run_id)
        types = [e["type"] for e in events]
        n.check(
            row is not None and row["status"] == "consumed" and row["attempts"] == 2
            and all(s == "consumed" for s in self.continuation_statuses(run_id)),
            f"continuation {row and row['name']} {row and row['status']} after {row and row['attempts']} "
            "executions: the body ran twice, the commit happened once",
            label="continuation committed exactly once (2 executions, 1 commit)",
        )  # fmt: skip
        n.check(
            effects[COMMITTED] == 1 and types.count("run.completed") == 1 and types.count("step.completed") == 1,
            f"effect count {effects[COMMITTED]} (rows written in the commit); "
            f"{types.count('step.completed')} step.completed and {types.count('run.completed')} run.completed event",
            label="effect count exactly 1",
        )
        n.check(
            effects[TOOL] == 1,
            f"the replay='never' deploy tool ran {effects[TOOL]} time: the second execution replayed its outcome",
            label="the replay='never' tool ran exactly once",
        )
        late = []
        for interaction_id, (receipt, payload) in receipts.items():
            again = self.call("POST", f"/v1/interactions/{interaction_id}/answer", HUMAN, json=payload)
            late.append(again.status_code == 200 and again.json() == receipt)
        question = next(i for i in asked if i["kind"] == "question")
        other = self.call("POST", f"/v1/interactions/{question['id']}/answer", HUMAN,
                          json={"response_id": "demo-late", "value": "tonight"})  # fmt: skip
        n.check(
            all(late) and other.status_code == 409,
            f"late answers: exact retries → 200 with the same receipts; a different answer → {other.status_code} "
            f"{other.json().get('error')}",
            label="late answers: same receipt for a retry, 409 for another answer",
        )
        self.print_events(run_id, events)

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

    def print_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        """The run's event log as a timeline, with the moments processes died and started (marked ─)."""
        n = self.n
        rows: list[tuple[datetime, str]] = []
        for event in events:
            at = datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00"))
            data = {k: v for k, v in (event.get("data") or {}).items() if k != "run_id"}
            brief = ", ".join(f"{k}={_brief(v)}" for k, v in data.items())
            rows.append((at, f"#{event['seq']:<4} {event['type']:<23} {brief}"[:150]))
        rows += [(at, f"{'─' * 5} {text}") for at, text in self.marks]
        n.line()
        n.line(f"event log: GET /v1/runs/{run_id}/events ({len(events)} events; ─ marks what the demo did)")
        for at, text in sorted(rows, key=lambda r: r[0]):
            n.line(f"{(at - n.started_at).total_seconds():6.1f}s  {text}")


def _brief(value: Any) -> str:
    if isinstance(value, str):
        return short(value) if len(value) >= 24 and " " not in value else value
    return json.dumps(value)[:60]


def summary(narrator: Narrator, *, finished: bool) -> bool:
    """The checks as a table; true only if the story finished and every check held."""
    n = narrator
    n.line()
    n.line("summary")
    for number, check in enumerate(n.checks, 1):
        n.line(f"  {number:>2}  {n.ok_mark if check.ok else n.bad_mark}  {check.label}")
    held = sum(c.ok for c in n.checks)
    ok = finished and held == len(n.checks) and held > 0
    verdict = "every check held" if ok else "NOT every check held" if finished else "the story did not finish"
    n.line(f"{held}/{len(n.checks)} checks held in {n.elapsed():.1f}s: {verdict}")
    return ok


def run_demo(*, keep: bool = False, verbose: bool = False, out: TextIO | None = None) -> int:
    """Run the story; returns 0 only if every check held (1 otherwise, 130 when interrupted)."""
    narrator = Narrator(out or sys.stdout)
    home = Path(tempfile.mkdtemp(prefix="parkway-demo-"))
    narrator.line("Parkway demo: the restart story, with real processes")
    narrator.line(f"PARKWAY_HOME={home} (embedded PostgreSQL + filesystem broker; ./var is not touched)")
    narrator.line(
        "children run with " + " ".join(f"{k}={v}" for k, v in DEMO_SETTINGS.items() if k != "PARKWAY_IMPORTS")
    )
    narrator.line()
    code = 1

    def interrupt(signum: int) -> None:
        raise Interrupted(signum)

    # The embedded PostgreSQL of its home is stopped before the home is kept or removed.
    with demo_environment(home) as env, embedded.running(embedded.data_dir(home)), stop_signals(interrupt):
        demo = Demo(home, env, narrator, verbose=verbose)
        try:
            demo.story()
            code = 0
        except DemoFailed as exc:
            narrator.line(f"stopped: {exc}")
            demo.tails()
        except Interrupted:
            narrator.line("interrupted")
            code = 130
        except Exception as exc:
            narrator.check(False, f"the demo itself failed: {type(exc).__name__}: {exc}")
            demo.tails()
        finally:
            demo.http.close()
            demo.stop_all()
    ok = summary(narrator, finished=code == 0)
    if ok and not keep:
        shutil.rmtree(home, ignore_errors=True)
    else:
        narrator.line(f"logs and database kept in {home}")
    return 0 if ok else (code or 1)
