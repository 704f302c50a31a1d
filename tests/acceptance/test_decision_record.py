"""The decision record (docs/operations.md): waits decided by a quorum (one place delegated), at an
escalation level, by nobody (expired) and with a sensitive field, parked and resumed by a real worker,
exported over HTTP by an auditor and by ``parkway decisions export``: exactly those decisions, with those
principals and levels, sensitive values never shown; the file verifies against its seal, and an edited file
names the first bad seq. An auditor reads the record and nothing else; nobody but an admin or an auditor
reads it."""

from __future__ import annotations

import csv
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import tests.team_workflows  # noqa: F401  (start() checks the workflow is registered in this process too)
from beat.sweep import run_sweep
from models import store
from parkway.db import transaction
from parkway.tokens import hash_token, new_token
from tasks.sdk import answer, delegate
from tests.support import AGENT, Stack, Worker, new_response_id, pass_time, start, wait_parked, wait_status

WORKFLOWS = "tests.workflows,tests.team_workflows"
YES = {"approved": True}
PIN = f"pin-{uuid.uuid4().hex}"  # the sensitive value: never in any output

pytestmark = pytest.mark.usefixtures("own_workers")


@pytest.fixture
def worker(stack: Stack) -> Worker:
    return stack.start_worker(PARKWAY_IMPORTS=WORKFLOWS)


def principal(kind: str, *targets: str) -> tuple[str, str]:
    """A new principal of ``kind`` granted on ``targets``: its name and bearer token."""
    name, token = f"rec-{kind}-{uuid.uuid4().hex[:6]}", new_token()
    with transaction() as session:
        made = store.create_principal(session, kind=kind, name=name, token_hash=hash_token(token))
        assert made is not None
        for target in targets:
            store.create_grant(session, principal_id=made.id, target=target)
    return name, token


def grant_agent(target: str) -> None:
    with transaction() as session:
        agent = store.principal_by_name(session, AGENT)
        assert agent is not None
        store.create_grant(session, principal_id=agent.id, target=target)


def decide_four_waits(team: str) -> dict[str, Any]:
    """On ``team``: a quorum-2 permission ana approves, and dee in cy's place (cy delegated it); one escalated
    to bo, who approves at level 1; one nobody answers before it expires; a question with a sensitive pin.
    Each run completed by the worker."""
    (ana, _), (cy, _), (bo, _) = principal("human", team), principal("human", team), principal("human")
    dee, _ = principal("human")  # granted on nothing: answers only in the place cy hands them
    runs = {
        "quorum": start("teams.approve", {"target": team, "quorum": 2}),
        "escalated": start("teams.approve", {"target": team, "assignees": [ana], "assignees_only": True,
                                             "escalate": [[300, [bo]]], "expires_in": 3600}),
        "expired": start("teams.approve", {"target": team, "expires_in": 60}),
        "sensitive": start("teams.ask", {"target": team, "quorum": 1}),
    }  # fmt: skip
    waits = {name: next(iter(wait_parked(run_id).values())).id for name, run_id in runs.items()}
    delegate(waits["quorum"], dee, principal=cy, note="on leave")
    for who in (ana, dee):
        answer(waits["quorum"], YES, response_id=new_response_id(), principal=who)
    answer(waits["sensitive"], {"note": "ok", "pin": PIN}, response_id=new_response_id(), principal=cy)
    pass_time(301)  # the escalation's level is reached, and the expiry passed
    run_sweep()
    answer(waits["escalated"], YES, response_id=new_response_id(), principal=bo)
    for run_id in runs.values():
        wait_status(run_id, "completed")
    while run_sweep().counts["sealed"]:  # every final event sealed
        pass
    return {"waits": waits, "ana": ana, "cy": cy, "bo": bo, "dee": dee}


def get(client: TestClient, token: str, path: str, **params: str) -> Any:
    return client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})


def test_record__exports_exactly_the_decisions_with_their_principals_and_levels__never_a_secret(
    stack: Stack, worker: Worker, client: TestClient
) -> None:
    # Given four waits decided on a team of their own (one through a delegation), and an auditor granted on it
    team = f"team:record-{uuid.uuid4().hex[:6]}"
    grant_agent(team)
    made = decide_four_waits(team)
    waits, ana, cy, bo, dee = made["waits"], made["ana"], made["cy"], made["bo"], made["dee"]
    _, auditor = principal("auditor", team)

    # When the auditor exports the record of that team
    response = get(client, auditor, "/v1/decisions", target=team)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]

    # Then the record holds exactly those four decisions, with who decided, at which level, and how
    records = {r["interaction_id"]: r for r in lines if "interaction_id" in r}
    assert set(records) == set(waits.values())
    quorum, escalated = records[waits["quorum"]], records[waits["escalated"]]
    expired, sensitive = records[waits["expired"]], records[waits["sensitive"]]
    assert (quorum["status"], quorum["quorum"], quorum["decided_by"]) == ("answered", 2, dee)
    responses = [(r["principal"], r["level"], r["verdict"], r["for"], r["justification"]) for r in quorum["responses"]]
    assert responses == [(ana, 0, "approved", None, None), (dee, 0, "approved", cy, None)]  # dee in cy's place
    assert (escalated["decided_by"], escalated["level"]) == (bo, 1)
    assert [(r["principal"], r["level"], r["verdict"]) for r in escalated["responses"]] == [(bo, 1, "approved")]
    assert (expired["status"], expired["decided_by"], expired["responses"]) == ("expired", None, [])
    assert expired["reason"] and expired["expires_at"]
    assert sensitive["responses"][0]["value"] == {"note": "ok", "pin": "***"}
    assert all(r["workflow"] and r["asked_at"] and r["decided_at"] and r["seq"] for r in records.values())
    # And the checkpoints that span them, and never the secret
    assert any("checkpoint" in line for line in lines) and lines[0]["export"]["target"] == team
    assert PIN not in response.text

    # And the CSV has the same rows
    as_csv = get(client, auditor, "/v1/decisions", target=team, format="csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert {r["interaction_id"] for r in rows} == set(records) and len(rows) == 4
    assert {r["interaction_id"]: r["decided_by"] for r in rows} == {
        k: v["decided_by"] or "" for k, v in records.items()
    }
    assert PIN not in as_csv.text

    # And the live log verifies for the auditor
    verified = get(client, auditor, "/v1/decisions/verify")
    assert verified.status_code == 200 and verified.json()["ok"], verified.text


def test_record__the_exported_file_verifies__an_edited_one_names_the_first_bad_seq(
    stack: Stack, worker: Worker, tmp_path: Path
) -> None:
    # Given decided waits, sealed, exported by the command line
    team = f"team:record-{uuid.uuid4().hex[:6]}"
    grant_agent(team)
    waits = decide_four_waits(team)["waits"]
    exported = tmp_path / "decisions.ndjson"
    made = stack.parkway("decisions", "export", "--target", team, str(exported))
    assert made.returncode == 0, made.stderr
    lines = exported.read_text().splitlines()
    assert {json.loads(line).get("interaction_id") for line in lines} - {None} == set(waits.values())
    assert PIN not in exported.read_text()

    # When it is verified untouched, it is ok
    ok = stack.parkway("decisions", "verify", "--live", str(exported))
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"], ok.stdout + ok.stderr

    # When one decision is changed, or one removed, the verdict names its seq
    at = next(i for i, line in enumerate(lines) if waits["escalated"] in line and "interaction_id" in line)
    record = json.loads(lines[at])
    for edited, word in (({**record, "decided_by": "someone-else"}, "changed"), (None, "removed")):
        rest = lines[:at] + ([json.dumps(edited)] if edited else []) + lines[at + 1 :]
        exported.write_text("\n".join(rest) + "\n")
        bad = stack.parkway("decisions", "verify", str(exported))
        verdict = json.loads(bad.stdout)
        assert bad.returncode == 1 and verdict["first_bad_seq"] == record["seq"] and word in verdict["problem"]


def test_record__an_auditor_reads_decisions_and_nothing_else__nobody_else_reads_them(
    stack: Stack, client: TestClient
) -> None:
    team = f"team:record-{uuid.uuid4().hex[:6]}"
    _, auditor = principal("auditor", team)
    assert get(client, auditor, "/v1/decisions").status_code == 200
    assert get(client, auditor, "/v1/decisions/key").json()["algorithm"] == "ed25519"
    for path in ("/v1/runs", "/v1/interactions", "/v1/principals", "/v1/events/stream", "/v1/workers"):
        assert get(client, auditor, path).status_code == 403, path
    for kind in ("agent", "human", "worker"):
        _, token = principal(kind, team)
        assert get(client, token, "/v1/decisions").status_code == 403, kind
        assert get(client, token, "/v1/decisions/verify").status_code == 403, kind


def test_record__a_span_end_is_an_iso_date__a_number_is_refused_not_read_as_unix_time(
    stack: Stack, client: TestClient
) -> None:
    team = f"team:record-{uuid.uuid4().hex[:6]}"
    _, auditor = principal("auditor", team)
    for path in ("/v1/decisions", "/v1/decisions/verify"):
        for good in ("2026-12-01", "2026-12-01T09:30:00", "2026-12-01T09:30:00Z", "2026-12-01T09:30+01:00"):
            assert get(client, auditor, path, since=good, until="2100-01-01").status_code == 200, (path, good)
        for bad in ("-34981", "1700000000", "0", "yesterday", "2026-13-01"):
            refused = get(client, auditor, path, since=bad)
            assert refused.status_code == 422 and refused.json()["error"] == "validation_error", (path, bad)
            assert "query.since" in refused.json()["detail"], refused.text
