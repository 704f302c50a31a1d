"""The event log of recorded workflows reads the same through every reader (issue 42, "Tests").

A plain Question answered once (``t.ask_one``) and a step with two questions answered in turn (``t.ask_two``)
run in this process through the real transitions; their events, read through what each endpoint serves
(``GET /v1/runs/{id}/events``: ``event_log.run_events``; the SSE stream of one run and of all:
``event_log.visible_events``) and rendered as the API renders them (``event_out``), with ids, times and
seqs replaced by names in order of first appearance, equal the golden file recorded before issue 42's
changes to the data model (on 324ea87). ``PARKWAY_WRITE_EVENT_GOLDEN=1`` writes the file anew.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select

from api.event_schemas import event_out
from models import event_log, store
from models.tables import Event
from parkway.db import transaction
from tasks.sdk import answer
from tests.integration.helpers import execute_ready, parked
from tests.support import AGENT, HUMAN, Stack, new_response_id, wait_for

GOLDEN = Path(__file__).with_name("event_log_golden.json")
_HEX = re.compile(r"[0-9a-f]{32}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?")


class Names:
    """Ids, times and seqs by name, in order of first appearance (a recording's values differ every run)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def name(self, kind: str, value: str) -> str:
        return self.seen.setdefault(f"{kind}:{value}", f"<{kind} {sum(k.startswith(kind) for k in self.seen)}>")

    def of(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self.of(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.of(v) for v in value]
        if key == "seq" and isinstance(value, int):
            return self.name("seq", str(value))
        if isinstance(value, str):
            value = _TIME.sub("<time>", value)
            return _HEX.sub(lambda m: self.name("id", m.group()), value)
        return value


def recorded() -> list[str]:
    """The recorded workflows' run ids: each answered and run to completion."""
    one, asked = parked("t.ask_one")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    execute_ready(one)
    two, asked = parked("t.ask_two")
    answer(asked["window"].id, "now", response_id=new_response_id(), principal=HUMAN)
    answer(asked["reason"].id, "because", response_id=new_response_id(), principal=HUMAN)
    execute_ready(two)
    return [one, two]


def read_through_every_reader(run_ids: list[str], after: int) -> dict[str, list[Any]]:
    """Each reader's events of the runs, as the API renders them (pages of 2, to cross page bounds)."""
    with transaction() as session:
        owner = store.principal_by_name(session, AGENT)
        assert owner is not None
        last = {r: max(session.scalars(select(Event.seq).where(Event.run_id == r))) for r in run_ids}

        def run_page(run_id: str, cursor: int) -> tuple[list[Event], int]:
            page = event_log.run_events(session, run_id, after=cursor, limit=2)
            return list(page.items), int(page.next) if page.next else -1

        def stream(run_id: str | None, cursor: int) -> tuple[list[Event], int]:
            return event_log.visible_events(session, owner, after=cursor, limit=2, run_id=run_id)

        by_reader: dict[str, list[Event]] = {
            "GET /v1/runs/{id}/events": [e for r in run_ids for e in pages(lambda c, r=r: run_page(r, c), last[r])],
            "SSE of one run": [e for r in run_ids for e in pages(lambda c, r=r: stream(r, c), last[r])],
            "SSE of all": [
                e for e in pages(lambda c: stream(None, c), max(last.values()), after) if e.run_id in run_ids
            ],
        }
        return {
            reader: [untraced(event_out(e).model_dump(mode="json")) for e in events]
            for reader, events in by_reader.items()
        }


def untraced(event: dict[str, Any]) -> dict[str, Any]:
    """An event as recorded before issue 44 added its ``trace_id``: null here, where nothing is traced."""
    assert event.pop("trace_id") is None, event
    return event


def pages(read: Any, through: int, after: int = 0) -> list[Event]:
    """Every page of a reader from ``after`` until it has given the event at ``through``, polled as a client
    polls: one read may stop short of events already final (``tests.support.read_stream``)."""
    events: list[Event] = []

    def caught_up() -> bool:
        page, _ = read(events[-1].seq if events else after)
        events.extend(page)
        return bool(events) and events[-1].seq >= through

    wait_for(caught_up, what=f"a reader past {through}")
    return events


def test_event_log__every_reader_gives_the_recorded_events_in_the_recorded_order(stack: Stack) -> None:
    # Given the recorded workflows, run to completion
    with transaction() as session:
        after = event_log.stream_cursor(session)
    run_ids = recorded()

    # When their events are read through every reader
    read = read_through_every_reader(run_ids, after)

    # Then every reader gives the same events, in the same order, as the golden file recorded before
    names = Names()
    got = {reader: names.of(events) for reader, events in read.items()}
    if os.environ.get("PARKWAY_WRITE_EVENT_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got["GET /v1/runs/{id}/events"], indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())
    for reader, events in got.items():
        assert events == golden, f"{reader} differs from {GOLDEN.name}"
