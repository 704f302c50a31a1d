"""``parkway demo``: the restart story with real processes, narrated as a timeline (issue 7, item 5).

On the embedded defaults (PostgreSQL + the embedded Valkey broker) in a fresh temporary ``PARKWAY_HOME`` (never
``./var``): start the API, a worker and beat; park a run on a Permission and a Question over HTTP; SIGKILL
the worker and the API while it waits; restart them and show the same questions still pending; answer
them; let the resuming worker die at ``resume.before_commit``; restart it; show the continuation committed
exactly once. Every claim is a check (✓/✗); the exit code is 0 only if all of them held.

The children run with a short lease and sweep cadence so recovery takes seconds, not minutes. Workers use
Celery's solo pool: one process each, so what is killed is exactly what dies, and the crash point's exit
code (137) is the worker's own.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from parkway import embedded
from parkway.children import stop_signals
from parkway.demo_narrator import DemoFailed, Narrator, brief_value, short, summary, wait_until
from parkway.demo_stack import (
    ADMIN,
    AGENT,
    COMMITTED,
    CRASH_POINT,
    DEMO_SETTINGS,
    EFFECTS_TABLE,
    HUMAN,
    TARGET,
    TOOL,
    DemoStack,
    demo_environment,
)

__all__ = ["ADMIN", "AGENT", "COMMITTED", "DEMO_SETTINGS", "EFFECTS_TABLE", "HUMAN", "TARGET", "TOOL", "run_demo"]


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop the children and leave."""


class Demo(DemoStack):
    """The story, told on the demo's stack."""

    # ----------------------------------------------------------------- the story

    def story(self) -> None:
        n = self.n
        revision = self.migrate()
        n.say(f"migrated a fresh database to revision {revision}; created table {EFFECTS_TABLE}")

        n.say(f"started {self.start_broker()}")
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

    def print_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        """The run's event log as a timeline, with the moments processes died and started (marked ─)."""
        n = self.n
        rows: list[tuple[datetime, str]] = []
        for event in events:
            at = datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00"))
            data = {k: v for k, v in (event.get("data") or {}).items() if k != "run_id"}
            brief = ", ".join(f"{k}={brief_value(v)}" for k, v in data.items())
            rows.append((at, f"#{event['seq']:<4} {event['type']:<23} {brief}"[:150]))
        rows += [(at, f"{'─' * 5} {text}") for at, text in self.marks]
        n.line()
        n.line(f"event log: GET /v1/runs/{run_id}/events ({len(events)} events; ─ marks what the demo did)")
        for at, text in sorted(rows, key=lambda r: r[0]):
            n.line(f"{(at - n.started_at).total_seconds():6.1f}s  {text}")


def run_demo(*, keep: bool = False, verbose: bool = False, out: TextIO | None = None) -> int:
    """Run the story; returns 0 only if every check held (1 otherwise, 130 when interrupted)."""
    narrator = Narrator(out or sys.stdout)
    home = Path(tempfile.mkdtemp(prefix="parkway-demo-"))
    narrator.line("Parkway demo: the restart story, with real processes")
    narrator.line(f"PARKWAY_HOME={home} (embedded PostgreSQL + embedded broker; ./var is not touched)")
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
