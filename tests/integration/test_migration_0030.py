"""Migration 0030 (the answer's functions made cheaper to run, the same rows and events written) on a live
deployment (issue 42).

A wait answered before the upgrade through 0029's functions and two answered after it write the same
events, key for key, and all three resume exactly once. The upgrade replaces functions only: it goes through
while transactions hold every table an answer writes.
"""

from __future__ import annotations

import json
from typing import Any

from alembic import command
from sqlalchemy import text

from parkway.db import get_engine, reset_engine, transaction
from parkway.migrate import alembic_config, current_revision, head_revision
from tasks.sdk import answer
from tests.integration import helpers
from tests.integration.helpers import live_head_db, real_publishes  # noqa: F401 (the fixtures head_db, sent)
from tests.support import HUMAN, Stack, new_response_id

FROM_REVISION = "0029"


def answer_events(run_id: str) -> list[tuple[str, list[str], Any]]:
    """The events the answer wrote (its batch: the interaction's, then the continuation's), each as its type,
    its data's keys in order and the values that name no row of this run."""
    with transaction() as session:
        batch = session.scalar(
            text(
                "SELECT events::text FROM event_batches WHERE run_id = :r AND events::text LIKE "
                "'%\"interaction.answered\"%'"
            ),
            {"r": run_id},
        )
    ids = ("run_id", "interaction_id", "step_id", "continuation_id")
    return [
        (e["type"], list(e["data"]), {k: v for k, v in e["data"].items() if k not in ids}) for e in json.loads(batch)
    ]


def test_migration_0030__waits_answered_before_and_after_it_write_the_same_events_and_resume_once(
    head_db: str, stack: Stack
) -> None:
    # Given three waits parked, the schema taken back to 0029, whose functions answer the first with no worker
    # running (its continuation ready, its message queued)
    waits = {run_id: asked["go"].id for run_id, asked in (helpers.parked("t.ask_one") for _ in range(3))}
    stack.flush_broker()
    early, *late = waits
    reset_engine()
    command.downgrade(alembic_config(), FROM_REVISION)
    reset_engine()
    assert answer(waits[early], "yes", response_id=new_response_id(), principal=HUMAN)["status"] == "answered"

    # When the database is upgraded to head, and the other two are answered
    reset_engine()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()
    for run_id in late:
        assert answer(waits[run_id], "yes", response_id=new_response_id(), principal=HUMAN)["status"] == "answered"

    # Then the answers after it wrote the events the answer before it did, in the same order, key for key
    before = answer_events(early)
    assert [event[0] for event in before] == ["interaction.answered", "continuation.ready"]
    for run_id in late:
        assert answer_events(run_id) == before

    # And once a worker runs, each run completes, its body ran once, its resume consumed at the first attempt
    stack.start_worker()
    for run_id in waits:
        helpers.completed_resumed_once(run_id)


def test_migration_0030__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision and a transaction holding every table an answer writes as a
    # writer does, when the upgrade runs beside it, then it completes while the writer is still open
    helpers.upgrade_beside_answers(FROM_REVISION)
