"""Who the event stream shows a run's events to: whoever may see the run, and, for the events of an
interaction, whoever may see that interaction (a person granted on a prompt's target but not on its run's
target gets the prompt live, as ``GET /v1/interactions`` lists it, and nothing else of the run)."""

from __future__ import annotations

from sqlalchemy import select

from models import event_log, store
from models.tables import Event, Principal
from parkway.db import transaction
from tasks.sdk import answer, start_run
from tests.integration.helpers import execute_ready
from tests.support import AGENT, HUMAN, STRANGER, Stack, interactions, new_response_id, read_stream

RUN_TARGET = "project:apollo"  # the run's; its question (t.ask_one) is for team:ops, where ana is granted


def principal(name: str) -> Principal:
    with transaction() as session:
        found = store.principal_by_name(session, name)
        assert found is not None
        return found


def seen(name: str, run_id: str, after: int, through: int) -> list[str]:
    """The types of ``run_id``'s events the stream gives ``name`` after ``after``, polled until its cursor
    passes ``through``."""
    who = principal(name)

    def read(cursor: int) -> tuple[list[Event], int]:
        with transaction() as session:
            return event_log.visible_events(session, who, after=cursor, limit=1000)

    return [
        e.type for e in read_stream(read, after, through, what=f"{name}'s stream past {through}") if e.run_id == run_id
    ]


def last_seq(run_id: str) -> tuple[list[str], int]:
    """Every event type of the run, in order, and the last one's seq."""
    with transaction() as session:
        rows = session.execute(select(Event.seq, Event.type).where(Event.run_id == run_id).order_by(Event.seq)).all()
    return [row.type for row in rows], rows[-1].seq


def test_stream__a_person_granted_on_the_prompt_target_gets_its_interaction_events_and_no_other(
    stack: Stack,
) -> None:
    # Given a run on a target ana is not granted on, parked on a question for team:ops, where she is
    with transaction() as session:
        store.create_grant(session, principal_id=principal(AGENT).id, target=RUN_TARGET)
    with transaction() as session:
        after = event_log.stream_cursor(session)
    run_id = start_run("t.ask_one", {}, principal=AGENT, target=RUN_TARGET)
    execute_ready(run_id)
    asked = interactions(run_id)["go"]
    # When she answers it
    answer(asked.id, "go", response_id=new_response_id(), principal=HUMAN)
    every, through = last_seq(run_id)
    # Then her stream had the question's events (asked, answered) and nothing else of the run
    for _ in range(300):
        assert seen(HUMAN, run_id, after, through) == ["interaction.asked", "interaction.answered"]
    # And the agent that owns the run got all of it, and eve, granted nowhere, none of it
    assert seen(AGENT, run_id, after, through) == every and len(every) > 2
    assert seen(STRANGER, run_id, after, through) == []
