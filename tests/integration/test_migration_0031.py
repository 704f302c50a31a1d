"""Migration 0031 (the answer as one function, its caller check without the team rules where none can apply)
on a live deployment (issue 42).

A wait answered before the upgrade through 0030's functions and two answered after it write the same events,
key for key, and all three resume exactly once. The upgrade replaces a function only: it goes through while
transactions hold every table an answer writes.
"""

from __future__ import annotations

from tests.integration import helpers
from tests.integration.helpers import live_head_db, real_publishes  # noqa: F401 (the fixtures head_db, sent)
from tests.support import Stack


def test_migration_0031__waits_answered_before_and_after_it_write_the_same_events_and_resume_once(
    head_db: str, stack: Stack
) -> None:
    helpers.same_events_across_upgrade(stack, "0030")


def test_migration_0031__goes_through_while_answers_hold_their_tables(head_db: str) -> None:
    helpers.upgrade_beside_answers("0030")
