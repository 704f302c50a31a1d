"""Every event's data carries what its writer knew: no field of its family's model is null where the
writer had the value (``run.completed`` once had ``workflow: null``, ``toolcall.settled`` ``replay: null``;
issue 35 §5). Runs of each outcome are driven through the real claim → body → consume path."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select

from api.event_schemas import event_out
from beat.sweep import run_sweep
from models import store
from models.tables import Event, Grant
from parkway.db import transaction
from tasks.sdk import answer, cancel
from tests.integration.helpers import execute_ready, parked
from tests.support import AGENT, HUMAN, new_response_id, start, wait_for

# The team events' fields (docs/teams.md: interaction.responded, .delegated, .reminded, .escalated, and a
# decision's progress), which no wait without team options has.
_TEAM = {"principal", "responses", "quorum", "level", "by", "to", "reminder"}

# The fields of a family that an event of this type does not know (or that do not apply to it), and the
# ids and names every other one must carry. Anything else null in its data is a value the writer dropped.
NOT_KNOWN: dict[str, set[str]] = {
    "run.created": {"status", "execution_id", "error", "error_details", "reason"},
    "run.completed": {"owner", "target", "error", "error_details", "reason"},
    "run.failed": {"owner", "target", "error_details", "reason"},
    "run.canceled": {"owner", "target", "error", "error_details"},
    "step.parked": {"continuation_id", "next", "reason"},
    "step.resumed": {"continuation", "next", "reason"},
    "step.completed": {"continuation", "continuation_id", "next", "reason"},
    "step.failed": {"continuation", "continuation_id", "next", "reason"},
    "step.canceled": {"continuation", "continuation_id", "next", "reason"},
    "interaction.asked": {"status", "answered_by", "canceled_by", "reason"} | _TEAM,
    "interaction.answered": {"canceled_by", "reason"} | _TEAM,
    "interaction.rejected": {"canceled_by", "reason"} | _TEAM,
    "interaction.canceled": {"answered_by"} | _TEAM,
    "run.interrupted": {"owner", "target", "error", "error_details"},
    "step.interrupted": {"continuation", "continuation_id", "next"},
    "interaction.expired": {"answered_by", "canceled_by", "reason"} | _TEAM,
    "interaction.interrupted": {"answered_by", "canceled_by"} | _TEAM,
    "continuation.ready": {"reason"},
    "toolcall.intent": {"ok"},
    "toolcall.settled": set(),
    "review.started": {"verdict", "finding_count", "verification_count", "reason"},
    "review.completed": {"reason"},
}


def _nulls(run_ids: list[str]) -> dict[str, set[str]]:
    """Per event type of these runs, the fields its typed data shows as null."""
    found: dict[str, set[str]] = defaultdict(set)
    with transaction() as session:
        for event in session.scalars(select(Event).where(Event.run_id.in_(run_ids)).order_by(Event.seq)):
            typed = event_out(event).data
            data = typed if isinstance(typed, dict) else typed.model_dump()
            found[event.type] |= {name for name, value in data.items() if value is None}
    return dict(found)


def test_event_data__no_null_where_the_writer_knew_the_value(actors_db: str) -> None:
    # Given runs that complete after an answer, fail, are canceled, reject a permission, call a tool, review
    answered, asked = parked("t.ask_one")
    answer(asked["go"].id, "go", response_id=new_response_id(), principal=HUMAN)
    execute_ready(answered)
    rejected, perms = parked("t.permission", {"cmd": "deploy"})
    answer(perms["shell"].id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)
    execute_ready(rejected)
    canceled, waits = parked("t.ask_one")
    cancel(waits["go"].id, response_id=new_response_id(), principal=HUMAN, reason="not now")
    expired, _ = parked("t.ask_one", {"expires_in": 0.05})
    wait_for(lambda: run_sweep().counts["expired"], what="the question expired by the sweep")
    execute_ready(expired)
    runs = [answered, rejected, canceled, expired]
    for workflow in ("t.fail", "t.tool", "t.review"):
        runs.append(start(workflow, {"replay": "safe"} if workflow == "t.tool" else {}))
        execute_ready(runs[-1])
    # and, last, a waiting run whose agent loses its grant: the sweep interrupts it
    interrupted, _ = parked("t.ask_one")
    runs.append(interrupted)
    with transaction() as session:
        agent = store.principal_by_name(session, AGENT)
        assert agent is not None
        for grant in session.scalars(select(Grant).where(Grant.principal_id == agent.id)):
            store.revoke_grant(session, grant.id)
    wait_for(lambda: run_sweep().counts["revoked"], what="the run interrupted by the sweep")

    # When their events are read as the API types them
    nulls = _nulls(runs)

    # Then each type's nulls are only the fields its writer could not know
    dropped = {t: sorted(fields - NOT_KNOWN.get(t, set())) for t, fields in nulls.items()}
    assert not {t: f for t, f in dropped.items() if f}, "\n".join(f"{t}: {f}" for t, f in dropped.items() if f)
    assert set(NOT_KNOWN) <= set(nulls), sorted(set(NOT_KNOWN) - set(nulls))
