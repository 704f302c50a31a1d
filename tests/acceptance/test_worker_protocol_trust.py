"""Trust in the HTTP worker protocol (SPEC §4, "Trust"; docs/worker-protocol.md, "Who"): a worker leases only
runs on targets it holds a live grant on, and its advertisement routes it nothing else. Real uvicorn, real
Celery worker, the remote workers driven with httpx."""

from __future__ import annotations

import dataclasses
import uuid

from tests.acceptance.protocol_support import Proto
from tests.support import continuations


def run_ids(items: list[dict[str, object]]) -> list[str]:
    return sorted(str(item["run_id"]) for item in items)


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

    # When its grant is revoked, it leases nothing, though its target's are due again
    revoked = proto.call("DELETE", f"/v1/grants/{proto.worker_grant}", "admin")
    assert revoked.status_code == 204, revoked.text
    assert [proto.lease(n=100, wait_s=0) for _ in range(3)] == [[], [], []]

    # And what a worker names in `serves` selects among what it may lease, never widens it
    assert other.lease(n=100, wait_s=0, serves=("proto.plan",)) == []
    # While the worker granted on the other target leases its runs, and an admin any
    assert run_ids(other.lease(n=100, wait_s=0)) == sorted(theirs)
    by_admin = proto.lease(n=100, wait_s=0, who="admin", worker="proto-admin")
    assert set(mine) <= set(run_ids(by_admin)), by_admin
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
