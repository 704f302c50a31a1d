"""``parkway grant create|list|revoke`` and ``parkway run start`` (issue 19, item 2), run as a subprocess
against the test database."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from models import access, store
from models.tables import Run
from parkway.db import transaction
from tests.support import AGENT, HUMAN, TARGET, Stack, Worker, wait_status


def made(stack: Stack, kind: str) -> str:
    name = f"cli-{kind}-{uuid.uuid4().hex[:8]}"
    created = stack.parkway("token", "create", "--kind", kind, "--name", name)
    assert created.returncode == 0, created.stderr
    return name


def runs_of(workflow: str) -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).select_from(Run).where(Run.workflow == workflow)) or 0)


def listed(stack: Stack, *args: str) -> list[list[str]]:
    out = stack.parkway("grant", "list", *args)
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:4] == ["ID", "PRINCIPAL", "KIND", "TARGET"], header
    return [row.split() for row in rows]


def test_grant__create_list_revoke_through_the_cli(stack: Stack) -> None:
    name = made(stack, "agent")
    target = f"team:{uuid.uuid4().hex[:6]}"

    created = stack.parkway("grant", "create", "--principal", name, "--target", target)
    assert created.returncode == 0, created.stderr
    grant_id = created.stdout.strip()
    assert len(created.stdout.splitlines()) == 1 and grant_id
    with transaction() as session:
        principal = store.principal_by_name(session, name)
        assert principal is not None and store.is_granted(session, principal, target)

    [row] = listed(stack, "--principal", name)
    assert row[:4] == [grant_id, name, "agent", target] and row[-1] == "-", row
    assert grant_id in {r[0] for r in listed(stack)}
    assert [r[0] for r in listed(stack, "--target", target)] == [grant_id]

    revoked = stack.parkway("grant", "revoke", grant_id)
    assert revoked.returncode == 0, revoked.stderr
    assert f"the grant of {name} on {target} revoked" in revoked.stdout
    with transaction() as session:
        principal = store.principal_by_name(session, name)
        assert principal is not None and not store.is_granted(session, principal, target)
    again = stack.parkway("grant", "revoke", grant_id)
    assert again.returncode == 0 and "was already revoked" in again.stdout, again.stdout + again.stderr
    assert listed(stack, "--principal", name) == []
    [row] = listed(stack, "--principal", name, "--all")
    assert row[0] == grant_id and row[-1] != "-", row


def test_grant__unknown_or_disabled_principal_and_unknown_grant_are_refused(stack: Stack) -> None:
    nobody = stack.parkway("grant", "create", "--principal", "nobody-" + uuid.uuid4().hex, "--target", TARGET)
    assert nobody.returncode == 1 and nobody.stdout == "" and "does not exist" in nobody.stderr
    name = made(stack, "human")
    assert stack.parkway("token", "revoke", name).returncode == 0
    disabled = stack.parkway("grant", "create", "--principal", name, "--target", TARGET)
    assert disabled.returncode == 1 and "is disabled" in disabled.stderr, disabled.stderr
    unknown = stack.parkway("grant", "revoke", uuid.uuid4().hex)
    assert unknown.returncode == 1 and "no grant has the id" in unknown.stderr, unknown.stderr


def test_run_start__with_no_worker_running_refuses_and_stores_nothing(stack: Stack) -> None:
    # Given no live worker (this module starts its worker after this test)
    with transaction() as session:
        assert store.live_workers(session) == []

    started = stack.parkway("run", "start", "t.after", "--as", AGENT, "--target", TARGET)

    assert (started.returncode, started.stdout) == (4, ""), (started.returncode, started.stderr)
    said = "parkway run start: no worker is running, so nothing would run t.after"
    assert started.stderr.startswith(said), started.stderr
    assert runs_of("t.after") == 0


@pytest.fixture(scope="module")
def worker(stack: Stack) -> Worker:
    """A real worker running tests.workflows (and not tests.checked.clean)."""
    return stack.start_worker(concurrency=1)


def test_run_start__a_workflow_no_live_worker_runs_is_refused_naming_it(stack: Stack, worker: Worker) -> None:
    # Given a workflow this shell's PARKWAY_IMPORTS defines, which the live worker was started without
    imports = "tests.workflows,tests.checked.clean"

    started = stack.parkway("run", "start", "chk.plan", "--as", AGENT, "--target", TARGET, PARKWAY_IMPORTS=imports)

    assert (started.returncode, started.stdout) == (4, ""), (started.returncode, started.stderr)
    assert started.stderr.startswith("parkway run start: no live worker runs chk.plan: the running workers were "
                                     "started without its module"), started.stderr  # fmt: skip
    assert runs_of("chk.plan") == 0


def test_run_start__starts_a_run_as_the_agent_and_prints_its_id(stack: Stack, worker: Worker) -> None:
    started = stack.parkway("run", "start", "t.after", "--payload", '{"n": 1}', "--as", AGENT, "--target", TARGET)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert len(started.stdout.splitlines()) == 1
    with transaction() as session:
        run = access.get_run(session, run_id)
        assert run is not None
        assert (run.workflow, run.payload, run.target) == ("t.after", {"n": 1}, TARGET)
    wait_status(run_id, "completed", sweep=False)  # the live worker ran it
    assert f"run {run_id} of t.after started as {AGENT}" in started.stderr


def test_run_start__bad_json_unknown_workflow_and_unknown_principal_have_their_exit_codes(
    stack: Stack, worker: Worker
) -> None:
    def start(workflow: str, payload: str, who: str, target: str = TARGET) -> tuple[int, str, str]:
        done = stack.parkway("run", "start", workflow, "--payload", payload, "--as", who, "--target", target)
        return done.returncode, done.stdout, done.stderr

    code, out, err = start("t.after", "{not json", AGENT)
    assert (code, out) == (2, "") and "--payload is not JSON" in err and "Traceback" not in err, err
    code, out, err = start("t.nothing_" + uuid.uuid4().hex[:6], "{}", AGENT)
    assert (code, out) == (3, "") and "no workflow is named" in err and "tests.workflows" in err, err
    code, out, err = start("t.after", "{}", "nobody-" + uuid.uuid4().hex)
    assert (code, out) == (1, "") and "does not exist" in err, err
    code, out, err = start("t.after", "{}", HUMAN)
    assert (code, out) == (1, "") and "runs are started by agents" in err, err
    code, out, err = start("t.after", "{}", AGENT, "team:none")
    assert (code, out) == (1, "") and "holds no grant on target team:none" in err, err
    documented = stack.parkway("run", "start", "--help")
    assert documented.returncode == 0 and "exit codes:" in documented.stdout
    assert all(f"  {code}  " in documented.stdout for code in range(5)), documented.stdout


def test_run_start__a_payload_the_workflow_does_not_declare_exits_2_storing_nothing(
    stack: Stack, worker: Worker
) -> None:
    before = runs_of("t.permission")  # its step declares payload={cmd: string}
    done = stack.parkway(
        "run", "start", "t.permission", "--payload", '{"cmnd": "ls"}', "--as", AGENT, "--target", TARGET
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "does not match what step t.permission declares: payload: 'cmd' is a required property" in done.stderr
    assert "Traceback" not in done.stderr and runs_of("t.permission") == before


def test_run_start__a_workflow_only_a_remote_worker_serves_is_started(stack: Stack, worker: Worker) -> None:
    # Given a remote worker (docs/worker-protocol.md) that leases chk.plan, which the live Celery worker lacks
    advert = store.Advert(id=uuid.uuid4().hex, node="agent-ts", pid=0, steps=("chk.plan",), continuations=(),
                          ttl_s=60, remote=True)  # fmt: skip
    with transaction() as session:
        store.advertise(session, advert)

    started = stack.parkway("run", "start", "chk.plan", "--as", AGENT, "--target", TARGET,
                            PARKWAY_IMPORTS="tests.workflows,tests.checked.clean")  # fmt: skip

    # Then the run is stored, for the remote worker to lease
    assert started.returncode == 0, started.stderr
    assert runs_of("chk.plan") == 1


def test_run_start__an_idempotency_key_returns_the_same_run_and_refuses_another_body(
    stack: Stack, worker: Worker
) -> None:
    key = "k-" + uuid.uuid4().hex

    def start(payload: str) -> tuple[int, str, str]:
        done = stack.parkway("run", "start", "t.after", "--payload", payload, "--as", AGENT, "--target", TARGET,
                             "--idempotency-key", key)  # fmt: skip
        return done.returncode, done.stdout.strip(), done.stderr

    before = runs_of("t.after")
    code, first, err = start('{"n": 7}')
    assert code == 0, err
    assert start('{"n": 7}')[:2] == (0, first)  # a retry: the same run, nothing more stored
    code, out, err = start('{"n": 8}')
    assert (code, out) == (1, "") and f"was used for run {first} with a different request" in err, err
    assert runs_of("t.after") == before + 1
    wait_status(first, "completed", sweep=False)
