"""The event log delivers exactly (issue 17 §1): an event whose transaction commits after a later
writer's is still delivered, once, in ``seq`` order, on every read path; an open writer holds delivery
back for as long as it stays open, and nothing is lost when it ends. Two real connections force the
interleaving; the readers are the store's read of a run, ``GET /v1/runs/{id}/events`` over the app and
the poll behind ``GET /v1/events/stream``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, make_url, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from api.routes.events import _poll
from models import event_log, store
from models.tables import Event, Principal
from parkway.db import session_factory, transaction
from parkway.settings import get_settings
from parkway.tokens import hash_token, new_token
from tests.support import AGENT, TARGET, wait_for

# Longer than any time-based horizon a reader might use (the one this replaced was 2 s).
HOLD_S = 3.0


def sse_poll(principal: Principal, after: int) -> tuple[list[tuple[int, str]], int]:
    """One poll of the SSE stream for ``principal`` (its events as (seq, JSON), and the next cursor)."""
    polled = _poll(lambda _session: principal, after)
    assert polled is not None
    return polled


@dataclass
class Followers:
    """Three clients following one run's log from a cursor, each as a client would."""

    run_id: str
    admin: Principal
    http: TestClient
    token: str
    cursors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("store", "http", "sse"), 0))
    got: dict[str, list[int]] = field(default_factory=lambda: {"store": [], "http": [], "sse": []})

    def read(self) -> None:
        with transaction() as session:
            page = event_log.run_events(session, self.run_id, after=self.cursors["store"], limit=100)
        self._take("store", [e.seq for e in page.items])
        response = self.http.get(
            f"/v1/runs/{self.run_id}/events",
            params={"after": self.cursors["http"]},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        assert response.status_code == 200, response.text
        self._take("http", [e["seq"] for e in response.json()["items"]])
        events, cursor = sse_poll(self.admin, self.cursors["sse"])
        self.got["sse"] += [seq for seq, data in events if f'"run_id":"{self.run_id}"' in data]
        self.cursors["sse"] = cursor

    def _take(self, reader: str, seqs: list[int]) -> None:
        self.got[reader] += seqs
        if seqs:
            self.cursors[reader] = seqs[-1]

    def have(self, seqs: list[int]) -> bool:
        self.read()
        return all(got == seqs for got in self.got.values())


def _admin() -> tuple[Principal, str]:
    token = new_token()
    with transaction() as session:
        admin = store.create_principal(session, kind="admin", name="log-admin", token_hash=hash_token(token))
        assert admin is not None
    return admin, token


def _new_run(session: Session) -> str:
    owner = store.principal_by_name(session, AGENT)
    assert owner is not None
    run, _ = store.create_run(
        session, workflow="t.ask_one", payload={}, owner=owner, target=TARGET, idempotency_key=None,
        request_digest="d",
    )  # fmt: skip
    return run.id


def _seqs(run_id: str) -> list[int]:
    with transaction() as session:
        return list(session.scalars(select(Event.seq).where(Event.run_id == run_id).order_by(Event.seq)))


@pytest.fixture
def followers(actors_db: str) -> Iterator[Followers]:
    from api.app import app

    admin, token = _admin()
    with transaction() as session:
        run_id = _new_run(session)
    with TestClient(app) as http:
        yield Followers(run_id=run_id, admin=admin, http=http, token=token)


def _open_writer(run_id: str, type_: str) -> tuple[Session, int]:
    """A transaction that has written one event and stays open, for as long as the test holds it (as a
    migration or another tool's session may: Parkway's own idle timeout off); the event's seq as it sees it."""
    session = session_factory()()
    session.begin()
    session.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
    store.append_event(session, run_id, type_)
    seq = session.scalar(select(func.max(Event.seq)).where(Event.type == type_))
    assert seq is not None
    return session, int(seq)


def test_event_log__a_lower_seq_committed_after_a_higher_one_is_delivered_once_in_order(
    followers: Followers,
) -> None:
    run_id = followers.run_id
    before = _seqs(run_id)
    wait_for(lambda: followers.have(before), what="the run's first events on every reader")

    # Writer A inserts (the lower seq) and holds its transaction; writer B inserts after it and commits
    writer_a, seq_a = _open_writer(run_id, "test.a")
    try:
        with transaction() as session:
            store.append_event(session, run_id, "test.b")
        seq_b = _seqs(run_id)[-1]
        assert seq_a < seq_b
        # A read while A is open delivers neither (B would move each cursor past A)
        followers.read()
        for reader, got in followers.got.items():
            assert seq_b not in got and seq_a not in got, reader
    finally:
        writer_a.commit()
        writer_a.close()

    # Once A committed: A then B on every reader, each exactly once, in seq order
    wait_for(lambda: followers.have([*before, seq_a, seq_b]), what="A's and B's events on every reader")


def test_event_log__a_long_open_writer_holds_delivery_back_and_then_everything_arrives(
    followers: Followers,
) -> None:
    run_id = followers.run_id
    before = _seqs(run_id)
    wait_for(lambda: followers.have(before), what="the run's first events on every reader")

    writer_a, seq_a = _open_writer(run_id, "test.slow")
    try:
        # Later writers commit: single events, and several from one transition (a run's start)
        for k in range(5):
            with transaction() as session:
                store.append_event(session, run_id, f"test.fast.{k}")
        with transaction() as session:
            other_run = _new_run(session)
        later = [s for s in _seqs(run_id) if s not in before and s != seq_a]
        assert len(later) == 5 and min(later) > seq_a
        # However long A stays open, no reader delivers anything past it
        held_until = time.monotonic() + HOLD_S
        while time.monotonic() < held_until:
            followers.read()
            for reader, got in followers.got.items():
                assert [s for s in got if s >= seq_a] == [], reader
            assert followers.cursors["sse"] < seq_a
            time.sleep(0.2)
    finally:
        writer_a.commit()
        writer_a.close()

    # When A ends, everything arrives, once and in order; the other run's events too (on the stream)
    everything = _seqs(run_id)
    assert everything == [*before, seq_a, *later]
    wait_for(lambda: followers.have(everything), what="every event on every reader")
    events, _ = sse_poll(followers.admin, 0)
    streamed = [seq for seq, _ in events]
    assert streamed == sorted(set(streamed))
    assert set(_seqs(other_run)) <= set(streamed)


def test_event_log__an_open_writer_in_another_database_of_the_cluster_holds_nothing_back(
    followers: Followers,
) -> None:
    # Given a transaction with a transaction id, open in another database of the same cluster (another
    # application sharing the server): its id is below every event written after it
    url = make_url(get_settings().database_url)
    foreign = create_engine(url.set(database="postgres"), poolclass=NullPool)
    with foreign.connect() as other:
        other.execute(text("SELECT pg_current_xact_id()"))
        # When this database's events commit while it stays open
        with transaction() as session:
            store.append_event(session, followers.run_id, "test.after_foreign")
        # Then every reader delivers them, without waiting for the other database's transaction
        wait_for(lambda: followers.have(_seqs(followers.run_id)), what="the events on every reader")
        other.rollback()
    foreign.dispose()


def test_event_seq__is_the_writing_transaction_then_its_count_and_refuses_a_65536th_event(actors_db: str) -> None:
    with transaction() as session:
        run_id = _new_run(session)
    insert = text(
        "INSERT INTO events (run_id, type, at, data) SELECT :run_id, 'test.bulk', now(), '{}' "
        "FROM generate_series(1, :n)"
    )
    with transaction() as session:
        xid = int(session.scalar(text("SELECT pg_current_xact_id()::text::bigint")) or 0)
        session.execute(insert, {"run_id": run_id, "n": 3})
        seqs = list(session.scalars(select(Event.seq).where(Event.type == "test.bulk").order_by(Event.seq)))
    assert seqs == [xid << 16 | 1, xid << 16 | 2, xid << 16 | 3]

    # A transaction may write 65535 events; the next one fails loud instead of colliding with another's
    with pytest.raises(DBAPIError, match="more than 65535 events"), transaction() as session:
        session.execute(insert, {"run_id": run_id, "n": 65535})
        session.execute(insert, {"run_id": run_id, "n": 1})
