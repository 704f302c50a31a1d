"""Migration 0030 (the answer's functions made cheaper to run, the same rows and events written) on a live
deployment (issue 42).

A wait answered before the upgrade through 0029's functions and two answered after it write the same
events, key for key, and all three resume exactly once. The upgrade replaces functions only: it goes through
while transactions hold every table an answer writes.
"""

from __future__ import annotations

from tests.integration import helpers
from tests.integration.helpers import live_head_db, real_publishes  # noqa: F401 (the fixtures head_db, sent)
from tests.support import Stack

FROM_REVISION = "0029"


def test_migration_0030__waits_answered_before_and_after_it_write_the_same_events_and_resume_once(
    head_db: str, stack: Stack
) -> None:
    helpers.same_events_across_upgrade(stack, FROM_REVISION)


def test_migration_0030__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    # Given the schema at the previous revision and a transaction holding every table an answer writes as a
    # writer does, when the upgrade runs beside it, then it completes while the writer is still open
    helpers.upgrade_beside_answers(FROM_REVISION)
