"""Outcomes keep their shapes (issue 17 §4): a failed run has ``result: null``; ``Fail(error, details)``
puts the details in ``error_details``, in the run row, the Run resource, the ``run.failed`` event and
``run_metadata.json`` (and so does the partial-failure context of a step completed under a running review)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from models import store
from models.tables import Event
from parkway.db import transaction
from parkway.settings import reset_settings
from parkway.tokens import hash_token, new_token
from tasks.projection import metadata_path
from tests.support import Stack, start, wait_for, wait_status

pytestmark = pytest.mark.usefixtures("own_workers")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A workspace of this test's own, for this process and the workers it starts."""
    path = tmp_path / "workspaces"
    path.mkdir()
    monkeypatch.setenv("PARKWAY_WORKSPACE_DIR", str(path))
    reset_settings()
    yield path
    reset_settings()


@pytest.fixture(scope="module")
def reader(stack: Stack) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The API in this process and an admin's bearer header (admins may read every run)."""
    from api.app import app

    token = new_token()
    with transaction() as session:
        store.create_principal(session, kind="admin", name="details-admin", token_hash=hash_token(token))
    with TestClient(app) as client:
        yield client, {"Authorization": f"Bearer {token}"}


def _run_failed_data(run_id: str) -> dict[str, object]:
    with transaction() as session:
        rows = session.scalars(select(Event.data).where(Event.run_id == run_id, Event.type == "run.failed")).all()
    [data] = rows
    return data  # type: ignore[no-any-return]


def _metadata(run_id: str) -> dict[str, object]:
    path = metadata_path(run_id)
    wait_for(path.exists, timeout=30, sweep=True, what=f"run_metadata.json of {run_id}")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_fail_with_details__error_details_apart_from_a_null_result(
    stack: Stack, workspace: Path, reader: tuple[TestClient, dict[str, str]]
) -> None:
    # Given a step that returns Fail(error, details)
    stack.start_worker()
    run_id = start("t.fail_details", {"checked": ["a", "b"]})
    # When it has run
    run = wait_status(run_id, "failed")
    # Then the run's result is null and the details have their own field, everywhere the outcome is shown
    details = {"code": 3, "checked": ["a", "b"]}
    assert (run.result, run.error, run.error_details) == (None, "the check broke", details)
    client, auth = reader
    resource = client.get(f"/v1/runs/{run_id}", headers=auth)
    assert resource.status_code == 200, resource.text
    body = resource.json()
    assert (body["status"], body["result"], body["error"], body["error_details"]) == (
        "failed", None, "the check broke", details,
    )  # fmt: skip
    event = _run_failed_data(run_id)
    assert (event["error"], event["error_details"]) == ("the check broke", details)
    assert _metadata(run_id)["error_details"] == details


def test_complete_under_a_running_review__partial_failure_context_in_error_details(
    stack: Stack, workspace: Path, reader: tuple[TestClient, dict[str, str]]
) -> None:
    # Given a step that returns Complete while the review it started is still running
    stack.start_worker()
    run_id = start("t.review", {"leave_running": True})
    run = wait_status(run_id, "failed")
    # Then error says why, the context is in error_details, and result is null
    assert run.error is not None and run.error.startswith("partial failure:")
    assert run.result is None
    context = run.error_details
    assert isinstance(context, dict) and context["partial_failure"] is True
    [review] = context["running_reviews"]
    assert (review["kind"], review["finding_count"], review["verification_count"]) == ("lint", 3, 2)
    assert context["result"] == {"review": review["id"]}  # what the step would have completed with
    client, auth = reader
    body = client.get(f"/v1/runs/{run_id}", headers=auth).json()
    assert (body["result"], body["error_details"]) == (None, context)
    assert _run_failed_data(run_id)["error_details"] == context
    assert _metadata(run_id)["error_details"] == context


def test_openapi__the_run_resource_has_error_details(reader: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = reader
    schema = client.get("/openapi.json").json()
    assert "error_details" in schema["components"]["schemas"]["RunOut"]["properties"]
