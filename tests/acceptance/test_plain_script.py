"""The SDK from a plain Python process that only has ``PARKWAY_IMPORTS`` set (issue 17 §4): ``start_run``
imports the workflow modules on first need; ``answer`` and ``cancel`` need none of them."""

from __future__ import annotations

import json

import pytest

from tests.support import AGENT, HUMAN, TARGET, Stack, wait_parked, wait_status

pytestmark = pytest.mark.usefixtures("own_workers")

START = f"""
import sys
from tasks.sdk import start_run
before = "tests.workflows" in sys.modules
run_id = start_run("t.ask_one", {{}}, principal={AGENT!r}, target={TARGET!r})
print(before, "tests.workflows" in sys.modules, run_id)
"""

RESPOND = """
import json, sys
from tasks import sdk
receipt = getattr(sdk, {verb!r})({iid!r}, response_id={rid!r}, principal={who!r}, **{extra!r})
print("tests.workflows" in sys.modules, json.dumps(receipt, default=str))
"""


def _start(stack: Stack) -> str:
    done = stack.run_python(START, PARKWAY_IMPORTS="tests.workflows")
    assert done.returncode == 0, done.stderr
    before, after, run_id = done.stdout.split()
    assert (before, after) == ("False", "True")  # the script did not import them; start_run did
    return run_id


def _respond(stack: Stack, verb: str, iid: str, **extra: object) -> dict[str, object]:
    code = RESPOND.format(verb=verb, iid=iid, rid=f"r-{verb}", who=HUMAN, extra=extra)
    done = stack.run_python(code, PARKWAY_IMPORTS="tests.workflows")
    assert done.returncode == 0, done.stderr
    imported, receipt = done.stdout.split(" ", 1)
    assert imported == "False"
    return json.loads(receipt)  # type: ignore[no-any-return]


def test_plain_script__starts_answers_and_cancels_with_only_parkway_imports_set(stack: Stack) -> None:
    # Given a worker, and scripts that import nothing but tasks.sdk
    stack.start_worker()
    # When one starts a run and another answers it
    answered = _start(stack)
    asked = wait_parked(answered)
    receipt = _respond(stack, "answer", asked["go"].id, value="yes")
    # Then the run completes
    assert receipt["status"] == "answered"
    assert wait_status(answered, "completed").result == {"go": "yes"}
    # And a run started the same way can be canceled from a plain script too
    canceled = _start(stack)
    asked = wait_parked(canceled)
    assert _respond(stack, "cancel", asked["go"].id, reason="not today")["status"] == "canceled"
    assert wait_status(canceled, "canceled").reason is not None
