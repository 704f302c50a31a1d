"""Reads behind the API (models/access.py): the event log's reads and the redaction of sensitive values."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TypeVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import access, cursors, event_log, store
from models.base import utcnow
from models.tables import Event, Interaction
from parkway.db import transaction
from tests.support import wait_for

T = TypeVar("T")


def make_run() -> str:
    with transaction() as session:
        owner = store.create_principal(session, kind="agent", name="horizon-bot", token_hash=None)
        assert owner is not None
        run, _ = store.create_run(
            session, workflow="t.ask_one", payload={}, owner=owner, target="team:ops",
            idempotency_key=None, request_digest="d",
        )  # fmt: skip
        return run.id


def test_event_reads__deliver_committed_events_in_order_and_a_stream_cursor_past_them(fresh_db: str) -> None:
    run_id = make_run()
    with transaction() as session:
        admin = store.create_principal(session, kind="admin", name="reads-admin", token_hash=None)
        assert admin is not None
        for k in range(3):
            store.append_event(session, run_id, f"test.read.{k}")
    with transaction() as session:
        seqs = list(session.scalars(select(Event.seq).where(Event.run_id == run_id).order_by(Event.seq)))

    def past_the_events(read: Callable[[Session], T], enough: Callable[[T], bool]) -> T:
        # On PostgreSQL every writer still open in the cluster holds the bound back, and the bound is not
        # monotonic between reads (tests.support.read_stream): read until a read reaches the events
        def once() -> tuple[T] | None:
            with transaction() as session:
                got = read(session)
            return (got,) if enough(got) else None

        found = wait_for(once, what="a read past the run's events")
        assert found is not None
        return found[0]

    page = past_the_events(lambda s: event_log.run_events(s, run_id, after=seqs[0], limit=2), lambda p: bool(p.items))
    assert [e.seq for e in page.items] == seqs[1:3] and page.next == str(seqs[2])
    events, cursor = past_the_events(
        lambda s: event_log.visible_events(s, admin, after=0, limit=100), lambda g: len(g[0]) == len(seqs)
    )
    assert [e.seq for e in events] == seqs and cursor >= seqs[-1]
    events, cursor = past_the_events(
        lambda s: event_log.visible_events(s, admin, after=0, limit=2), lambda g: bool(g[0])
    )
    assert [e.seq for e in events] == seqs[:2] and cursor == seqs[1]
    with transaction() as session:
        assert event_log.visible_events(session, admin, after=2**62, limit=2) == ([], 2**62)


def test_public_value__redacts_sensitive_fields_always() -> None:
    def row(status: str, value: object, sensitive: list[str]) -> Interaction:
        return Interaction(status=status, value=value, sensitive=sensitive)

    assert access.public_value(row("pending", None, ["otp"])) is None
    assert access.public_value(row("answered", {"user": "a", "otp": "1"}, ["otp"])) == {
        "user": "a",
        "otp": "***",
    }
    assert access.public_value(row("answered", None, ["otp"])) == {"otp": "***"}  # erased after consumption
    assert access.public_value(row("answered", {"user": "a"}, ["otp"])) == {
        "user": "a",
        "otp": "***",
    }  # apart
    assert access.public_value(row("answered", "plain", ["otp"])) == "***"
    assert access.public_value(row("answered", "now", [])) == "now"
    assert access.public_value(row("expired", None, [])) is None
    assert access.public_value(row("rejected", {"approved": False}, [])) == {"approved": False}


def _forged(text: str) -> str:
    """A cursor shaped like ours around ``text`` (what a caller can make without being handed it)."""
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode().rstrip("=")


# Decodable cursors whose text no row can hold: they must be refused, never sent to the database.
UNSTORABLE_POSITIONS = [
    _forged('["2026-01-01T00:00:00+00:00","a\\u0000b"]'),
    _forged('["2026-01-01T00:00:00+00:00","\\ud800"]'),
]
UNSTORABLE_TEXTS = ["AA", _forged("\ud800"), _forged("a\x00")]


def test_cursor__round_trips_and_refuses_forgeries() -> None:
    at = utcnow()
    assert cursors.read_position(cursors.position_cursor(at, "abc")) == (at, "abc")
    assert cursors.read_text(cursors.text_cursor("ana")) == "ana"
    for forged in ("", "x", "bm90IGpzb24", "WzEsMl0", "é", *UNSTORABLE_POSITIONS):
        with pytest.raises(cursors.InvalidCursor):
            cursors.read_position(forged)
    for forged in ("", "x", "é", *UNSTORABLE_TEXTS):
        with pytest.raises(cursors.InvalidCursor):
            cursors.read_text(forged)
