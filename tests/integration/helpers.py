"""Helpers for integration tests that drive the store and the worker path in-process (no worker processes)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from models import store
from models.tables import Continuation, Event, Grant, Interaction, Principal, Run, Step
from parkway.db import transaction
from tests.support import (
    ADMIN,
    AGENT,
    HUMAN,
    STRANGER,
    TARGET,
    Stack,
    continuations,
    effects,
    interactions,
    new_response_id,
    run_status,
    start,
    wait_for,
    wait_status,
)

T = TypeVar("T")

EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS test_effects (run_id VARCHAR(64) NOT NULL, tag VARCHAR(64) NOT NULL)"


def advertise(
    node: str, *, continuations: tuple[str, ...] = (), steps: tuple[str, ...] = (), ttl_s: float = 600
) -> str:
    """A live worker ``node`` in the fleet's SQL registry, running what it names (as its heartbeat writes
    it); returns its id. Passing time (``pass_time``) past its ttl makes it dead."""
    advert = store.Advert(id=store.new_id(), node=node, pid=0, steps=tuple(sorted(steps)),
                          continuations=tuple(sorted(continuations)), ttl_s=ttl_s)  # fmt: skip
    with transaction() as session:
        store.advertise(session, advert)
    return advert.id


def make_actors() -> None:
    """The same principals and grants as ``Stack.setup_actors``, in whatever database is current."""
    with transaction() as session:
        session.execute(text(EFFECTS_DDL))
        for kind, name in (("agent", AGENT), ("human", HUMAN), ("human", STRANGER), ("admin", ADMIN)):
            if store.principal_by_name(session, name) is None:
                store.create_principal(session, kind=kind, name=name, token_hash=None)
        for name in (AGENT, HUMAN):
            principal = store.principal_by_name(session, name)
            assert principal is not None
            store.create_grant(session, principal_id=principal.id, target=TARGET)


def add_principal(name: str, kind: str, *, grant: str | None = None) -> None:
    with transaction() as session:
        principal = store.create_principal(session, kind=kind, name=name, token_hash=None)
        assert principal is not None, f"principal {name} already exists"
        if grant is not None:
            store.create_grant(session, principal_id=principal.id, target=grant)


def live_grant_ids(name: str, target: str = TARGET) -> list[str]:
    with transaction() as session:
        return list(
            session.scalars(
                select(Grant.id)
                .join(Principal, Principal.id == Grant.principal_id)
                .where(Principal.name == name, Grant.target == target, Grant.revoked_at.is_(None))
            )
        )


def ready(run_id: str) -> list[Continuation]:
    return [c for c in continuations(run_id) if c.status == "ready"]


def execute_ready(run_id: str) -> Continuation:
    """Run the run's only ready continuation through the real claim → body → consume path."""
    from tasks.worker import execute

    due = ready(run_id)
    assert len(due) == 1, f"expected one ready continuation, found {[(c.kind, c.status) for c in due]}"
    outcome = execute(due[0].id)
    assert outcome == "committed", outcome
    return due[0]


def parked(workflow: str, payload: Any = None) -> tuple[str, dict[str, Interaction]]:
    """Start a run and execute its start continuation in-process: the step parks; returns its interactions."""
    run_id = start(workflow, payload if payload is not None else {})
    execute_ready(run_id)
    assert run_status(run_id) == "waiting", run_status(run_id)
    return run_id, interactions(run_id)


def someone_waits_for_a_lock() -> bool:
    """A session of this database is waiting for a row lock."""
    with transaction() as session:
        waiting = session.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(waiting)


def answer_in(session: Session, interaction_id: str, value: Any) -> store.AnswerReceipt:
    """Answer as ana inside the caller's transaction (which then holds the step's lock)."""
    from tasks.sdk import response_digest

    who = store.principal_ref_by_name(session, HUMAN)
    assert who is not None
    return store.answer(session, interaction_id, value=value, response_id=new_response_id(),
                        response_digest=response_digest(value), principal=who)  # fmt: skip


def while_held(hold: Callable[[Session], Any], act: Callable[[], T]) -> T:
    """``act()`` in a thread while a transaction that ran ``hold`` (taking a step's lock) stays open, until
    ``act`` has ended or waits for a lock; then that transaction commits. What ``act`` returned or raised."""
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with transaction() as session:
            hold(session)
            holding.set()
            assert release.wait(30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        held = pool.submit(holder)
        assert holding.wait(30)
        acting = pool.submit(act)
        wait_for(lambda: acting.done() or someone_waits_for_a_lock(), timeout=30, what="the act to end or wait")
        release.set()
        held.result(timeout=30)
        return acting.result(timeout=30)


def continuation(continuation_id: str) -> Continuation:
    with transaction() as session:
        return session.get_one(Continuation, continuation_id)


def interaction(interaction_id: str) -> Interaction:
    with transaction() as session:
        return session.get_one(Interaction, interaction_id)


def step(step_id: str) -> Step:
    with transaction() as session:
        return session.get_one(Step, step_id)


def events(run_id: str) -> list[tuple[str, dict[str, Any]]]:
    with transaction() as session:
        rows = session.execute(select(Event.type, Event.data).where(Event.run_id == run_id).order_by(Event.seq))
        return [(t, d) for t, d in rows]


def count(model: Any) -> int:
    with transaction() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def count_runs() -> int:
    return count(Run)


def purge_queues() -> None:
    """Empty the broker's queues (this test process's own Redis database), as a flushed broker would be."""
    from tasks.celery_app import app

    with app.connection_for_write() as conn:
        for queue in app.amqp.queues.values():
            queue.bind(conn.default_channel).purge()


@dataclass
class Sent:
    """Tasks published through ``app.send_task`` during a test: ``(task name, continuation id, queue)``."""

    calls: list[tuple[str, Any, Any]] = field(default_factory=list)

    def ids(self) -> list[Any]:
        return [c[1] for c in self.calls]

    def clear(self) -> None:
        self.calls.clear()


@contextlib.contextmanager
def database_at(stack: Stack, revision: str, fill: Callable[[], None]) -> Iterator[str]:
    """A database of its own at the schema ``revision``, filled by ``fill``; the stack and this process point
    at it until the block ends (its workers then killed, the database dropped)."""
    from alembic import command

    from parkway.db import reset_engine
    from parkway.migrate import alembic_config
    from tests.conftest import drop_database, new_database, use_database

    url = new_database()
    previous = stack.database_url
    use_database(url)
    stack.database_url = url
    try:
        command.upgrade(alembic_config(), revision)
        fill()
        reset_engine()
        yield url
    finally:
        stack.stop_all()
        stack.database_url = previous
        reset_engine()
        drop_database(url)
        use_database(previous)


def completed_resumed_once(run_id: str) -> None:
    """Wait for the run (a ``t.ask_one`` answered) to complete, then: its continuation body ran once and
    its one resume was consumed at the first attempt."""
    wait_status(run_id, "completed")
    assert effects(run_id, "one_done") == 1
    resumes = [c for c in continuations(run_id) if c.kind == "resume"]
    assert [(c.status, c.attempts) for c in resumes] == [("consumed", 1)]


@pytest.fixture(name="sent")
def real_publishes() -> None:
    """For a live migration's module (imported there): publishes are real (this package's ``sent`` records
    them instead), a worker consumes them."""


@pytest.fixture(name="head_db")
def live_head_db(stack: Stack) -> Iterator[str]:
    """For a live migration's module (imported there): a database of its own at head with the test's actors
    (this code writes the columns of later revisions)."""
    with database_at(stack, "head", stack.setup_actors) as url:
        yield url


# What an answer writes (or locks): a live upgrade must not wait for any of them.
ANSWER_TABLES = ("interactions", "steps", "runs", "continuations", "event_batches", "principals")


def upgrade_beside_answers(revision: str) -> None:
    """From the schema at ``revision``, ``alembic upgrade head`` completes while a transaction holds every
    table an answer writes as a writer does (and one step's row lock, as an answer in flight does): its lock
    timeout is 1 s, so were it to wait for that writer, it would fail."""
    from alembic import command

    from parkway.db import get_engine, reset_engine
    from parkway.migrate import alembic_config, current_revision, head_revision

    reset_engine()
    command.downgrade(alembic_config(), revision)
    reset_engine()
    writer = get_engine().connect()
    try:
        for table in ANSWER_TABLES:
            writer.execute(text(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE"))
        writer.execute(text("SELECT id FROM steps LIMIT 1 FOR UPDATE"))
        command.upgrade(alembic_config(), "head")
        assert current_revision(get_engine()) == head_revision()
    finally:
        writer.rollback()
        writer.close()


@contextlib.contextmanager
def upgrade_refused_while_held(table: str, revision: str) -> Iterator[None]:
    """While a transaction holds ``table`` as a writer does, ``alembic upgrade head`` fails on its lock
    timeout and the schema stays at ``revision``; the block checks what else it left unchanged. Once the
    writer has ended (after the block), the upgrade goes through."""
    from alembic import command
    from sqlalchemy.exc import OperationalError

    from parkway.db import get_engine, reset_engine
    from parkway.migrate import alembic_config, current_revision, head_revision

    reset_engine()
    writer = get_engine().connect()
    try:
        writer.execute(text(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE"))
        with pytest.raises(OperationalError, match="lock timeout"):
            command.upgrade(alembic_config(), "head")
        assert current_revision(get_engine()) == revision
        yield
    finally:
        writer.rollback()
        writer.close()
    command.upgrade(alembic_config(), "head")
    assert current_revision(get_engine()) == head_revision()


def answered_after_upgrade(stack: Stack, waits: dict[str, str], late: list[str]) -> None:
    """After ``parked_then_taken_back`` and the upgrade: a worker runs, and the ``late`` waits are answered."""
    from tasks.sdk import answer

    stack.start_worker()
    for run_id in late:
        receipt = answer(waits[run_id], "after", response_id=new_response_id(), principal=HUMAN)
        assert receipt["status"] == "answered"


def parked_then_taken_back(stack: Stack, revision: str) -> tuple[dict[str, str], list[str]]:
    """Three ``t.ask_one`` waits parked at head, the first answered with no worker running (its continuation
    ready, its message queued), then the schema taken back to ``revision``, as a deployment of it holds them:
    the waits' interaction ids by run, and the runs of the two not answered yet."""
    from alembic import command

    from parkway.db import reset_engine
    from parkway.migrate import alembic_config
    from tasks.sdk import answer

    waits = {run_id: asked["go"].id for run_id, asked in (parked("t.ask_one") for _ in range(3))}
    stack.flush_broker()
    early, *late = waits
    answer(waits[early], "before", response_id=new_response_id(), principal=HUMAN)
    reset_engine()
    command.downgrade(alembic_config(), revision)
    return waits, late


def same_events_across_upgrade(stack: Stack, revision: str) -> None:
    """A live upgrade from ``revision`` to head that changes how an answer is written, not what: a wait
    answered before it and two answered after it write the same events (``answer_events``), and all three
    resume exactly once once a worker runs."""
    from alembic import command

    from parkway.db import get_engine, reset_engine
    from parkway.migrate import alembic_config, current_revision, head_revision
    from tasks.sdk import answer

    # Given three waits parked, the schema taken back to the revision, which answers the first with no worker
    # running (its continuation ready, its message queued)
    waits = {run_id: asked["go"].id for run_id, asked in (parked("t.ask_one") for _ in range(3))}
    stack.flush_broker()
    early, *late = waits
    reset_engine()
    command.downgrade(alembic_config(), revision)
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
        completed_resumed_once(run_id)


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
