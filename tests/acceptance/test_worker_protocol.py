"""The HTTP worker protocol (issue 33) end to end: a real ``uvicorn api.app:app`` and a real ``celery worker``,
the remote worker driven with httpx as a TypeScript or Go agent would (docs/worker-protocol.md)."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select, text, update

from models.tables import Continuation, Interaction, ToolCall
from parkway.db import transaction
from tasks.publish import publish
from tests.acceptance.protocol_support import DECIDE, PLAN, QUESTION, SERVES, Proto, receipts
from tests.support import TARGET, continuations, event_types, pass_time, run_row, wait_for


def celery_results(proto: Proto, run_id: str) -> list[str]:
    """What the module's Celery worker answered to each task of the run's continuations, by its log (JSON
    lines): ``'duplicate'`` is a delivery whose claim was refused, anything else a claim it won."""
    ids = {c.id for c in continuations(run_id)}
    records = [json.loads(line) for line in proto.celery.text().splitlines() if line.startswith("{")]
    return [r["message"].rpartition(": ")[2] for r in records
            if r["logger"] == "celery.app.trace" and r.get("continuation_id") in ids]  # fmt: skip


def test_park_from_outside__answer__resume_leased_with_answers__completed_once(proto: Proto) -> None:
    run_id = proto.park()
    assert proto.run(run_id)["status"] == "waiting"
    proto.answer(run_id, {"code": "123456", "note": "ok"})

    item = proto.lease_one(run_id)
    assert (item["kind"], item["name"], item["version"], item["key"], item["attempt"]) == (
        "resume", "proto.decide", 1, DECIDE, 1)  # fmt: skip
    assert item["snapshot"] == {"cmd": "deploy api"}
    otp = item["answers"]["otp"]
    assert (otp["status"], otp["value"], otp["answered_by"]) == ("answered", {"code": "123456", "note": "ok"},
                                                                 "proto-human")  # fmt: skip

    done = proto.complete(item["lease_id"], {"type": "complete", "result": {"deployed": True}})
    assert done.status_code == 200, done.text
    assert (done.json()["outcome"], done.json()["run_status"]) == ("complete", "completed")
    run = proto.run(run_id)
    assert (run["status"], run["result"]) == ("completed", {"deployed": True})
    types = event_types(run_id)
    for expected in ("run.created", "step.parked", "interaction.asked", "interaction.answered", "continuation.ready",
                     "step.resumed", "run.completed"):  # fmt: skip
        assert expected in types, types
    with transaction() as session:
        otp_row = session.scalars(select(Interaction).where(Interaction.run_id == run_id)).one()
        assert otp_row.secret is None  # the sensitive value was erased by the completing transaction
    [resume] = continuations(run_id)
    assert (resume.remote, resume.status, resume.attempts, resume.claimed_by) == (
        True, "consumed", 1, item["lease_id"])  # fmt: skip
    assert receipts(run_id) == 1


def test_start_served_only_remotely__leased_as_start__parks__resumes__completes(proto: Proto) -> None:
    made = proto.call("POST", "/v1/runs", "agent", {"workflow": PLAN, "payload": {"service": "api"},
                                                    "target": proto.target})  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    start = proto.lease_one(run_id)
    assert (start["kind"], start["name"], start["version"], start["payload"]) == ("start", PLAN, None,
                                                                                  {"service": "api"})  # fmt: skip
    parked = proto.complete(start["lease_id"], {"type": "park", "continuation": DECIDE, "snapshot": {"s": 1},
                                                "interactions": [QUESTION]})  # fmt: skip
    assert (parked.status_code, parked.json()["run_status"]) == (200, "waiting"), parked.text
    proto.answer(run_id, {"code": "42"})
    resume = proto.lease_one(run_id)
    assert (resume["kind"], resume["snapshot"], resume["answers"]["otp"]["value"]) == ("resume", {"s": 1},
                                                                                       {"code": "42"})  # fmt: skip
    assert proto.complete(resume["lease_id"], {"type": "complete", "result": 1}).status_code == 200
    run = proto.run(run_id)
    assert (run["status"], [s["status"] for s in run["steps"]]) == ("completed", ["completed"])  # parked, resumed
    assert [t for t in event_types(run_id) if t.startswith(("step.", "run."))] == [
        "run.created", "step.parked", "step.resumed", "step.completed", "run.completed"]  # fmt: skip
    assert all(c.remote for c in continuations(run_id))
    # Never claimed by the Celery worker: a delivery that reached it was refused (the claim skips remote rows)
    assert set(celery_results(proto, run_id)) <= {"'duplicate'"}, celery_results(proto, run_id)


def test_python_step_hands_over_to_a_remote_step__leased_not_run_by_celery(proto: Proto) -> None:
    made = proto.call("POST", "/v1/runs", "agent", {"workflow": "t.to_remote", "payload": {"to": PLAN},
                                                    "target": proto.target})  # fmt: skip
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    item = proto.lease_one(run_id)
    assert (item["kind"], item["name"], item["payload"]) == ("start", PLAN, {"from": "python"})
    assert proto.complete(item["lease_id"], {"type": "complete"}).status_code == 200
    assert proto.run(run_id)["status"] == "completed"
    first, second = continuations(run_id)
    assert (first.remote, second.remote, second.attempts) == (False, True, 1)
    # The Celery worker ran the Python step (the claim ``celery_results`` sees), never the remote one
    wait_for(lambda: "'committed'" in celery_results(proto, run_id), what="the Python step's task in the log")
    assert sorted(set(celery_results(proto, run_id))) in (["'committed'"], ["'committed'", "'duplicate'"])


def test_start_of_a_workflow_no_worker_ever_advertised__422_naming_it__a_park_nothing_serves_now_waits(
    proto: Proto,
) -> None:
    started = proto.call("POST", "/v1/runs", "agent", {"workflow": "proto.nobody", "target": TARGET})
    assert started.status_code == 422 and "proto.nobody" in started.json()["detail"], started.text
    listed = proto.call("GET", "/v1/runs", "agent", params={"workflow": "proto.nobody"}).json()["items"]
    assert listed == []
    # A park on a version nothing serves right now (a rollout) is accepted and waits for a worker that serves it
    body = {"workflow": "proto.outside", "target": proto.target,
            "park": {"continuation": "proto.later@1", "interactions": [QUESTION]}}  # fmt: skip
    parked = proto.call("POST", "/v1/runs", "agent", body)
    assert parked.status_code == 201, parked.text
    assert proto.run(parked.json()["id"])["status"] == "waiting"


def test_park_from_outside_with_team_options__quorum_of_two__item_lists_each_response(proto: Proto) -> None:
    # Issue 34 item 7: the HTTP outcome expresses a team's wait (docs/teams.md) as the Python SDK does.
    made = proto.call("POST", "/v1/principals", "admin", {"kind": "human", "name": "proto-bo"})
    assert made.status_code == 201, made.text
    bo = {"Authorization": f"Bearer {made.json()['token']}"}  # named, not granted on the target
    nobody = {**QUESTION, "quorum": 2, "assignees": ["proto-ghost"]}
    body = {"workflow": "proto.outside", "target": proto.target,
            "park": {"continuation": DECIDE, "interactions": [nobody]}}  # fmt: skip
    refused = proto.call("POST", "/v1/runs", "agent", body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert refused.status_code == 403 and "proto-ghost" in refused.json()["detail"], refused.text
    leads = proto.call("POST", "/v1/grants", "admin", {"principal": "proto-agent", "target": "team:leads"})
    assert leads.status_code == 201, leads.text  # a run's waits address only targets its owner is granted on
    team = {**QUESTION, "quorum": 2, "assignees": ["proto-bo"], "escalate": [[3600, "team:leads"]],
            "expires_in": 7200}  # fmt: skip
    run_id = proto.park(interactions=[team])
    (asked,) = proto.run(run_id)["interactions"]
    wait = proto.call("GET", f"/v1/interactions/{asked['id']}", "human").json()
    escalated = [{"after": 3600.0, "to": "team:leads"}]
    assert (wait["quorum"], wait["assignees"], wait["escalate"]) == (2, ["proto-bo"], escalated)

    first = proto.call("POST", f"/v1/interactions/{asked['id']}/answer", "human",
                       {"response_id": uuid.uuid4().hex, "value": {"code": "111", "note": "one"}})  # fmt: skip
    assert (first.status_code, first.json()["status"]) == (200, "pending"), first.text
    by_bo = {"response_id": uuid.uuid4().hex, "value": {"code": "222", "note": "two"}}
    second = proto.http.post(f"/v1/interactions/{asked['id']}/answer", headers=bo, json=by_bo)
    assert (second.status_code, second.json()["status"]) == (200, "answered"), second.text

    item = proto.lease_one(run_id)
    otp = item["answers"]["otp"]
    assert (otp["status"], otp["answered_by"], otp["value"]) == ("answered", "proto-bo", by_bo["value"])
    assert [(r["principal"], r["value"], r["level"]) for r in otp["responses"]] == [
        ("proto-human", {"code": "111", "note": "one"}, 0), ("proto-bo", by_bo["value"], 0)]  # fmt: skip
    assert proto.complete(item["lease_id"], {"type": "complete"}).status_code == 200
    assert "interaction.responded" in event_types(run_id)


def test_lease_abandoned__re_leased_after_expiry_with_attempt_2__late_completion_409__completed_once(
    proto: Proto,
) -> None:
    run_id = proto.due()
    first = proto.lease_one(run_id, lease_s=5)
    # The agent stops here (killed): no heartbeat, no completion. Its lease runs out; the work is leased again.
    second = proto.lease_one(run_id, wait_s=20)
    assert (second["attempt"], second["lease_id"] != first["lease_id"]) == (2, True)
    late_beat = proto.call("POST", f"/v1/worker/leases/{first['lease_id']}/heartbeat", "worker", {})
    assert (late_beat.status_code, late_beat.json()["error"]) == (409, "lease_lost"), late_beat.text
    assert proto.complete(second["lease_id"], {"type": "complete", "result": "second"}).status_code == 200
    late = proto.complete(first["lease_id"], {"type": "complete", "result": "first"})
    assert late.status_code == 410, late.text  # the run ended (completed by the second lease)
    assert late.json()["state"]["run_status"] == "completed"
    assert (run_row(run_id).result, receipts(run_id)) == ("second", 1)


def test_late_completion_of_a_lost_lease__409_with_state__nothing_committed(proto: Proto) -> None:
    run_id = proto.due()
    first = proto.lease_one(run_id, lease_s=5)
    second = proto.lease_one(run_id, wait_s=20)  # re-leased once the first lease ran out
    late = proto.complete(first["lease_id"], {"type": "complete", "result": "late"})
    assert (late.status_code, late.json()["error"]) == (409, "lease_lost"), late.text
    assert late.json()["state"]["continuation_status"] == "claimed"
    assert (proto.run(run_id)["status"], receipts(run_id)) == ("running", 0)  # its resume is leased, not done
    assert proto.complete(second["lease_id"], {"type": "complete", "result": "won"}).status_code == 200
    assert run_row(run_id).result == "won"


def test_heartbeat_keeps_the_lease_past_its_first_end(proto: Proto) -> None:
    run_id = proto.due()
    item = proto.lease_one(run_id, lease_s=5)
    beat = proto.call("POST", f"/v1/worker/leases/{item['lease_id']}/heartbeat", "worker", {"lease_s": 60})
    assert beat.status_code == 200, beat.text
    assert beat.json()["lease_expires_at"] > item["lease_expires_at"]
    assert proto.lease(wait_s=6) == []  # past the first end: not leased again
    assert proto.complete(item["lease_id"], {"type": "complete"}).status_code == 200


def test_exact_retry_of_a_completion__same_receipt__another_outcome_409(proto: Proto) -> None:
    run_id = proto.due()
    item = proto.lease_one(run_id)
    outcome = {"type": "next", "step": PLAN, "payload": {"n": 1}}
    first = proto.complete(item["lease_id"], outcome)
    again = proto.complete(item["lease_id"], outcome)
    assert (first.status_code, again.status_code) == (200, 200), again.text
    assert first.json() == again.json()
    assert first.json()["outcome"] == "next" and first.json()["run_status"] == "running"
    other = proto.complete(item["lease_id"], {"type": "complete"})
    assert (other.status_code, other.json()["error"]) == (409, "lease_lost"), other.text
    following = proto.lease_one(run_id)
    assert (following["kind"], following["name"], following["payload"]) == ("start", PLAN, {"n": 1})
    assert proto.complete(following["lease_id"], {"type": "complete"}).status_code == 200
    assert receipts(run_id) == 2


@pytest.mark.parametrize(
    "outcome",
    [
        {"type": "next", "step": ""},
        {"type": "fail", "error": ""},
        {"type": "park", "continuation": DECIDE, "interactions": []},
        {"type": "bogus"},
        {"result": 1},
    ],
    ids=["next-unnamed", "fail-empty", "park-empty", "unknown-type", "no-type"],
)
def test_invalid_outcome__422__nothing_committed__lease_kept(proto: Proto, outcome: Any) -> None:
    run_id = proto.due()
    item = proto.lease_one(run_id)
    bad = proto.complete(item["lease_id"], outcome)
    assert bad.status_code == 422, bad.text
    not_json = proto.http.post(f"/v1/worker/leases/{item['lease_id']}/complete", content=b"{not json",
                               headers={"Authorization": f"Bearer {proto.tokens['worker']}",
                                        "Content-Type": "application/json"})  # fmt: skip
    assert not_json.status_code == 422, not_json.text
    assert (proto.run(run_id)["status"], receipts(run_id)) == ("running", 0)
    assert proto.complete(item["lease_id"], {"type": "complete", "result": "ok"}).status_code == 200


def test_never_tool_intent_then_lease_lost__possibly_ran__never_run_again(proto: Proto) -> None:
    run_id = proto.due()
    first = proto.lease_one(run_id, lease_s=5)
    call = {"name": "shell", "key": "apply", "args": {"cmd": "deploy"}, "replay": "never"}
    intent = proto.call("POST", f"/v1/worker/leases/{first['lease_id']}/tools", "worker", call)
    assert intent.json() == {"state": "run", "result": None, "error": None, "possibly_ran": False}, intent.text
    # The agent dies between the intent and the outcome: the effect may have happened.
    second = proto.lease_one(run_id, wait_s=20)
    again = proto.call("POST", f"/v1/worker/leases/{second['lease_id']}/tools", "worker", call)
    assert again.status_code == 200, again.text
    assert (again.json()["state"], again.json()["possibly_ran"]) == ("settled", True)
    third = proto.call("POST", f"/v1/worker/leases/{second['lease_id']}/tools", "worker", call)
    assert third.json()["state"] == "settled"  # never "run", whatever asks again
    safe = {"name": "read", "key": "look", "args": {}, "replay": "safe"}
    assert proto.call("POST", f"/v1/worker/leases/{second['lease_id']}/tools", "worker", safe).json()["state"] == "run"
    settled = proto.call("POST", f"/v1/worker/leases/{second['lease_id']}/tools/look/outcome", "worker", {"result": 7})
    assert (settled.json()["state"], settled.json()["result"]) == ("settled", 7), settled.text
    replayed = proto.call("POST", f"/v1/worker/leases/{second['lease_id']}/tools", "worker", safe).json()
    assert (replayed["state"], replayed["result"]) == ("settled", 7)
    assert proto.complete(second["lease_id"], {"type": "complete"}).status_code == 200
    with transaction() as session:
        apply = session.scalars(select(ToolCall).where(ToolCall.run_id == run_id, ToolCall.key == "apply")).one()
    assert (apply.phase, apply.possibly_ran, apply.runs) == ("settled", True, 1)
    assert "toolcall.possibly_ran" in event_types(run_id)


def test_two_concurrent_lease_calls__one_gets_the_item(proto: Proto) -> None:
    run_id = proto.due()
    gate = threading.Barrier(2)

    def lease() -> list[Any]:
        gate.wait()
        return proto.lease(wait_s=2, n=5, worker=f"racer-{threading.get_ident()}")

    with ThreadPoolExecutor(2) as pool:
        got = [item for items in pool.map(lambda _: lease(), range(2)) for item in items]
    assert [item["run_id"] for item in got] == [run_id], got


def test_release_counts_an_attempt__out_of_attempts_interrupts_the_run(proto: Proto) -> None:
    run_id = proto.due()
    for attempt in range(1, 6):  # PARKWAY_MAX_ATTEMPTS is 5 in the tests
        item = proto.lease_one(run_id)
        assert item["attempt"] == attempt
        released = proto.release(item["lease_id"], "cannot run it now")
        assert released.status_code == 200, released.text
        assert released.json()["attempts"] == attempt
    run = wait_for(lambda: (r := proto.run(run_id))["status"] == "interrupted" and r, what="run interrupted")
    assert "gave up after 5 attempts" in run["reason"], run["reason"]


def test_worker_token__cannot_answer_or_start__reads_only_runs_of_its_granted_target(proto: Proto) -> None:
    # Given a run waiting on the worker's target, and one due on a target it holds no grant on (team:ops)
    run_id = proto.park()
    elsewhere = dataclasses.replace(proto, target=TARGET).due()
    run = proto.call("GET", f"/v1/runs/{run_id}", "human").json()
    iid = run["interactions"][0]["id"]
    answered = proto.call("POST", f"/v1/interactions/{iid}/answer", "worker", {"response_id": "w", "value": {}})
    assert answered.status_code == 403, answered.text
    started = proto.call("POST", "/v1/runs", "worker", {"workflow": PLAN, "target": proto.target})
    assert started.status_code == 403, started.text
    # Its grant covers its target's runs (it leases their payloads), nothing else
    assert proto.call("GET", f"/v1/runs/{run_id}", "worker").status_code == 200
    assert proto.call("GET", f"/v1/runs/{elsewhere}", "worker").status_code == 403
    assert [r["id"] for r in proto.call("GET", "/v1/runs", "worker").json()["items"]] == [run_id]
    assert proto.call("GET", "/v1/interactions", "worker").json()["items"] == []  # they ask team:ops
    assert proto.lease(n=100, wait_s=0) == []  # the due one is not its to lease
    agent_lease = proto.call("POST", "/v1/worker/lease", "agent", {"worker": "x", "serves": [PLAN], "wait_s": 0})
    assert agent_lease.status_code == 403


def test_remote_worker_listed_in_workers_and_leases_in_metrics(proto: Proto) -> None:
    run_id = proto.due()  # due work the heartbeat-only call (max 0) must not take
    beat = proto.call("POST", "/v1/worker/lease", "worker", {"worker": "ts-agent-listed", "serves": SERVES, "max": 0})
    assert beat.json() == {"items": []}, beat.text
    workers = proto.call("GET", "/v1/workers", "admin").json()["items"]
    listed = next(w for w in workers if w["node"] == "ts-agent-listed")
    assert listed["remote"] is True and DECIDE in listed["continuations"] and PLAN in listed["steps"]
    assert any(not w["remote"] for w in workers)  # the Celery worker beside it
    item = proto.lease_one(run_id)
    metrics = proto.http.get("/metrics").text
    assert "parkway_remote_leases_outstanding" in metrics and "parkway_remote_leases_expired" in metrics
    assert [c.status for c in continuations(run_id)] == ["claimed"]
    assert proto.complete(item["lease_id"], {"type": "complete"}).status_code == 200
    assert [c.status for c in continuations(run_id)] == ["consumed"]


def test_remote_work_that_reached_celery__handed_to_the_leases__not_bounced(proto: Proto) -> None:
    # Given a due continuation of a remotely served key that went to Celery (made while a Celery worker also
    # served its key, say): the row is not remote, and its message is in the broker.
    run_id = proto.park()
    proto.answer(run_id, {"code": "1"})
    [resume] = continuations(run_id)
    assert resume.remote
    with transaction() as session:
        session.execute(update(Continuation).where(Continuation.id == resume.id).values(remote=False))
    publish([(resume.id, "resume")])
    # When the Celery worker takes it, it hands it to the remote workers' leases, once, spending no attempt.
    wait_for(lambda: continuations(run_id)[0].remote, timeout=30, what="the continuation handed to remote leases")
    item = proto.lease_one(run_id)
    assert item["attempt"] == 1
    assert proto.complete(item["lease_id"], {"type": "complete"}).status_code == 200
    assert proto.run(run_id)["status"] == "completed"


def test_remote_work_nobody_serves_any_more__fails_closed_after_the_grace(proto: Proto) -> None:
    # Given due remote work, and then its remote worker gone for longer than the grace (5 s in the tests),
    # while the Celery worker lives on.
    run_id = proto.due()
    pass_time(120)
    with transaction() as session:
        back = text("UPDATE continuations SET created_at = created_at - interval '120 seconds' WHERE run_id = :r")
        session.execute(back, {"r": run_id})
    try:
        # Then the sweep interrupts the run, naming the version, once the Celery worker is heard from again.
        run = wait_for(lambda: (r := proto.run(run_id))["status"] == "interrupted" and r, sweep=True,
                       what="remote work nobody serves interrupted")  # fmt: skip
        assert f"continuation version {DECIDE}: no live worker has advertised it since" in run["reason"]
        assert continuations(run_id)[0].status == "dead"
    finally:
        proto.lease(wait_s=0)  # served again, for whatever runs after
