"""Reads behind the API (models/access.py): the event horizon and the redaction of sensitive values."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from models import access, store
from models.base import utcnow
from models.tables import Event, Interaction
from parkway.db import is_postgres, transaction
from tests.conftest import BACKEND


def make_run() -> str:
    with transaction() as session:
        owner = store.create_principal(session, kind="agent", name="horizon-bot", token_hash=None)
        assert owner is not None
        run, _ = store.create_run(
            session, workflow="t.ask_one", payload={}, owner=owner, target="team:ops",
            idempotency_key=None, request_digest="d",
        )  # fmt: skip
        return run.id


def test_event_horizon__stops_before_a_fresh_gap_and_passes_an_old_one(fresh_db: str) -> None:
    run_id = make_run()
    if BACKEND != "postgres":
        # SQLite serializes writers: seq never has an in-flight gap, so there is never a horizon.
        with transaction() as session:
            assert not is_postgres(session)
            assert access.event_horizon(session) is None
        return
    with transaction() as session:
        assert is_postgres(session)
        top = int(session.scalar(select(func.max(Event.seq))) or 0)
        assert access.event_horizon(session) is None
        # A transaction still open holds top+1; a later one committed top+2 just now
        session.add(Event(seq=top + 2, run_id=run_id, type="x", at=utcnow(), data={}))
    with transaction() as session:
        assert access.event_horizon(session) == top
        page = access.run_events(session, run_id, after=0, limit=100)
        assert [e.seq for e in page.items][-1] == top
    with transaction() as session:
        session.get_one(Event, top + 2).at = utcnow() - timedelta(seconds=10)
    with transaction() as session:
        # Long enough ago: the hole was a rolled-back insert, readers go past it
        assert access.event_horizon(session) is None


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


def test_cursor__round_trips_and_refuses_forgeries() -> None:
    at = utcnow()
    assert access._decode_cursor(access._encode_cursor(at, "abc")) == (at, "abc")
    for forged in ("", "x", "bm90IGpzb24", "WzEsMl0"):
        with pytest.raises(access.InvalidCursor):
            access._decode_cursor(forged)
