"""Trust in the HTTP worker protocol (SPEC §4, "Trust"; docs/worker-protocol.md, "Who"): a worker leases only
runs on targets it holds a live grant on, its advertisement routes it nothing else, and a lease is its
holder's. Real uvicorn, real Celery worker, the remote workers driven with httpx."""

from __future__ import annotations

import dataclasses
import uuid

from sqlalchemy import select

from models.tables import ToolCall
from parkway.db import transaction
from tests.acceptance.protocol_support import Proto, receipts
from tests.support import continuations, run_row

NEVER = {"name": "shell", "key": "apply", "args": {"cmd": "deploy"}, "replay": "never"}


def run_ids(items: list[dict[str, object]]) -> list[str]:
    return sorted(str(item["run_id"]) for item in items)


def tool_call(run_id: str, key: str) -> ToolCall | None:
    with transaction() as session:
        return session.scalars(select(ToolCall).where(ToolCall.run_id == run_id, ToolCall.key == key)).first()


def test_a_worker_leases_only_runs_on_its_granted_targets__revoked_nothing__granted_or_admin_lease_the_rest(
    proto: Proto,
) -> None:
    # Given due resumes on the worker's target, and as many on another target whose own worker serves them too
    other = proto.for_test()
    mine, theirs = [proto.due() for _ in range(3)], [other.due() for _ in range(3)]

    # When the worker asks again and again, with both due, for all it may take
    leased = [item for _ in range(5) for item in proto.lease(n=100, wait_s=0)]

    # Then it gets its target's, never the other's
    assert run_ids(leased) == sorted(mine)
    for item in leased:
        assert proto.release(item["lease_id"]).status_code == 200

    # When its grant is revoked while it holds a lease, it leases nothing, though its target's are due again,
    # and the lease in its hand is its no more: every call on it is 404 and changes nothing
    [held] = proto.lease(n=1, wait_s=0)
    revoked = proto.call("DELETE", f"/v1/grants/{proto.worker_grant}", "admin")
    assert revoked.status_code == 204, revoked.text
    assert [proto.lease(n=100, wait_s=0) for _ in range(3)] == [[], [], []]
    lease = f"/v1/worker/leases/{held['lease_id']}"
    for path, body in ((f"{lease}/heartbeat", {}), (f"{lease}/complete", {"outcome": {"type": "complete"}}),
                       (f"{lease}/tools", NEVER), (f"{lease}/release", {})):  # fmt: skip
        answer = proto.call("POST", path, "worker", body)
        assert (answer.status_code, answer.json().get("error")) == (404, "not_found"), (path, answer.text)
    leased_one = str(held["lease_id"]).partition(".")[0]
    assert [(c.status, c.claimed_by) for c in continuations(str(held["run_id"])) if c.id == leased_one] == [
        ("claimed", held["lease_id"])
    ]

    # And what a worker names in `serves` selects among what it may lease, never widens it
    assert other.lease(n=100, wait_s=0, serves=("proto.plan",)) == []
    # While the worker granted on the other target leases its runs, and an admin any
    assert run_ids(other.lease(n=100, wait_s=0)) == sorted(theirs)
    by_admin = proto.lease(n=100, wait_s=0, who="admin", worker="proto-admin")
    assert set(mine) - {held["run_id"]} <= set(run_ids(by_admin)), by_admin
    for item in by_admin:
        assert proto.call("POST", f"/v1/worker/leases/{item['lease_id']}/release", "admin", {}).status_code == 200


def test_an_advertisement_routes_no_work_of_a_target_its_worker_is_not_granted_on(proto: Proto) -> None:
    # Given a continuation only the proto worker (granted on its own target alone) serves, and another target
    # the agent and the person are granted on, which no remote worker is
    key = f"proto.routed-{uuid.uuid4().hex[:8]}@1"
    assert proto.lease(n=0, wait_s=0, serves=(key,)) == []
    elsewhere = dataclasses.replace(proto, target=f"team:ungranted-{uuid.uuid4().hex[:8]}")
    for role in ("agent", "human"):
        proto.grant(f"proto-{role}", elsewhere.target)

    # When a run there parks on that continuation and is answered
    run_id = elsewhere.park(continuation=key)
    elsewhere.answer(run_id, {"code": "1"})

    # Then its resume is not routed to the remote workers (none may lease it): it stays with Celery
    [resume] = continuations(run_id)
    assert (resume.name, resume.remote) == (key, False)


def test_calls_on_a_lease_by_anyone_but_its_holder__404__nothing_changed__the_holder_completes_once(
    proto: Proto,
) -> None:
    # Given a leased item whose holder journaled a `never` tool call (not settled yet)
    run_id = proto.due()
    lease = proto.lease_one(run_id)["lease_id"]
    intent = proto.call("POST", f"/v1/worker/leases/{lease}/tools", "worker", NEVER)
    assert intent.json()["state"] == "run", intent.text
    [before] = continuations(run_id)
    # And another worker granted on the same target, an admin, and a lease id of the same continuation
    name, proto.tokens["peer"] = proto.principal("worker")
    proto.grant(name, proto.target)
    forged = f"{lease.partition('.')[0]}.{'0' * 16}"

    # When each of them calls on the lease (the holder under the forged id too)
    calls = [
        (f"{lease}/heartbeat", {"lease_s": 600}),
        (f"{lease}/release", {"reason": "mine now"}),
        (f"{lease}/tools", {**NEVER, "key": "other"}),
        (f"{lease}/tools/apply/outcome", {"result": "forged"}),
        (f"{forged}/tools/apply/outcome", {"result": "forged"}),
        (f"{lease}/complete", {"outcome": {"type": "complete", "result": "forged"}}),
    ]
    for who, path, body in [*((who, *call) for who in ("peer", "admin") for call in calls), ("worker", *calls[4])]:
        refused = proto.call("POST", f"/v1/worker/leases/{path}", who, body)
        # Then each gets 404, and nothing changed
        assert (refused.status_code, refused.json().get("error")) == (404, "not_found"), (who, path, refused.text)
    [after] = continuations(run_id)
    assert (after.status, after.claimed_by, after.attempts, after.lease_expires_at) == (
        "claimed", lease, before.attempts, before.lease_expires_at)  # fmt: skip
    apply = tool_call(run_id, "apply")
    assert apply is not None and (apply.phase, apply.outcome) == ("executing", None)
    assert tool_call(run_id, "other") is None

    # And the holder settles its call and completes, once; a stranger's retry of that completion learns nothing
    settled = proto.call("POST", f"/v1/worker/leases/{lease}/tools/apply/outcome", "worker", {"result": "ran"})
    assert (settled.status_code, settled.json()["result"]) == (200, "ran"), settled.text
    assert proto.complete(lease, {"type": "complete", "result": "mine"}).status_code == 200
    again = {"outcome": {"type": "complete", "result": "mine"}}
    retry = proto.call("POST", f"/v1/worker/leases/{lease}/complete", "peer", again)
    assert retry.status_code == 404, retry.text
    assert (run_row(run_id).result, receipts(run_id)) == ("mine", 1)


def test_a_tool_outcome_is_accepted_only_under_the_lease_that_journaled_the_call(proto: Proto) -> None:
    # Given a `safe` call journaled under a first lease, which then ran out and the item was leased again
    run_id = proto.due()
    first = proto.lease_one(run_id, lease_s=5)["lease_id"]
    look = {"name": "read", "key": "look", "args": {}, "replay": "safe"}
    assert proto.call("POST", f"/v1/worker/leases/{first}/tools", "worker", look).json()["state"] == "run"
    second = proto.lease_one(run_id, wait_s=20)["lease_id"]

    # When the second lease, which never journaled it, sends an outcome for it: 404, nothing recorded
    by_second = proto.call("POST", f"/v1/worker/leases/{second}/tools/look/outcome", "worker", {"result": "forged"})
    assert (by_second.status_code, by_second.json()["error"]) == (404, "not_found"), by_second.text
    call = tool_call(run_id, "look")
    assert call is not None and (call.phase, call.outcome) == ("executing", None)

    # Then the first lease, lost meanwhile, still records what ran (what ran is kept), and the second reads it
    by_first = proto.call("POST", f"/v1/worker/leases/{first}/tools/look/outcome", "worker", {"result": 7})
    assert (by_first.status_code, by_first.json()["result"]) == (200, 7), by_first.text
    replayed = proto.call("POST", f"/v1/worker/leases/{second}/tools", "worker", look).json()
    assert (replayed["state"], replayed["result"]) == ("settled", 7)
    assert proto.complete(second, {"type": "complete"}).status_code == 200
