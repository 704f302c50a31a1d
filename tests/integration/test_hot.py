"""Hot statements (``parkway.hot``): the same parameters, rows, events and errors as ``Connection.execute``.

PostgreSQL only (collected on that run): the hot paths run there, and SQLite binds parameters by position.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, event, insert, literal, select, text, true
from sqlalchemy.exc import DBAPIError, IntegrityError, InvalidRequestError

from models import store
from models.tables import Event, Principal, Run
from parkway.db import get_engine, single_statement, transaction
from parkway.hot import HotStatement
from tasks.sdk import Complete, Context, continuation
from tests.integration.test_db_connections import _kill_pooled_connections

_EVENTS = Event.__table__
_RUNS = Run.__table__


def _run(session: Any) -> str:
    owner = store.create_principal(session, kind="agent", name=f"hot-{store.new_id()}", token_hash=None)
    assert owner is not None
    run, _ = store.create_run(
        session, workflow="t.ask_one", payload={"n": 1}, owner=owner, target="team:hot",
        idempotency_key=None, request_digest="d",
    )  # fmt: skip
    return run.id


# An insert with a JSON and a UTCDateTime parameter (their bind processors), returning them read back
# through a SELECT (their result processors), as the hot statements' data-modifying CTEs do.
_INSERTED = (
    insert(_EVENTS)
    .values(run_id=bindparam("rid"), type=bindparam("type"), at=bindparam("at", type_=_EVENTS.c.at.type),
            data=bindparam("data", type_=_EVENTS.c.data.type))
    .returning(_EVENTS.c.seq, _EVENTS.c.at, _EVENTS.c.data)
    .cte("inserted")
)  # fmt: skip
_INSERT_AND_READ = select(
    _INSERTED.c.seq, _INSERTED.c.at, _INSERTED.c.data, literal(True).label("flag"), _RUNS.c.created_at
).join(_RUNS, _RUNS.c.id == bindparam("rid"))


def test_hot_statement__binds_and_reads_as_connection_execute(fresh_db: str) -> None:
    with transaction() as session:
        run_id = _run(session)
    # A time given in another zone is stored and read back as UTC, a dict as JSON, as SQLAlchemy does.
    at = datetime(2026, 12, 2, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    params = {"rid": run_id, "type": "test.hot", "at": at, "data": {"k": [1, "x"], "none": None}}
    with single_statement() as conn:
        hot = HotStatement(_INSERT_AND_READ).rows(conn, params)
        plain = conn.execute(_INSERT_AND_READ, params).all()
    assert len(hot) == len(plain) == 1
    assert hot[0]._fields == tuple(plain[0]._fields) == ("seq", "at", "data", "flag", "created_at")
    assert hot[0][1:] == tuple(plain[0])[1:]
    assert hot[0].seq < plain[0].seq
    assert hot[0].at == at and hot[0].at.tzinfo == UTC
    assert hot[0].data == {"k": [1, "x"], "none": None} and hot[0].flag is True


def test_hot_statement__first_is_none_without_rows_and_a_missing_parameter_is_refused(fresh_db: str) -> None:
    statement = HotStatement(select(_RUNS.c.id).where(_RUNS.c.id == bindparam("rid")))
    with single_statement() as conn:
        assert statement.first(conn, {"rid": "nope"}) is None
        with pytest.raises(InvalidRequestError, match="rid"):
            statement.rows(conn, {})


def test_hot_statement__runs_in_the_session_s_transaction(fresh_db: str) -> None:
    with transaction() as session:
        run_id = _run(session)
    statement = HotStatement(_INSERT_AND_READ)
    params = {"rid": run_id, "type": "test.hot", "at": datetime.now(UTC), "data": {}}
    with pytest.raises(RuntimeError), transaction() as session:
        statement.rows(session, params)
        raise RuntimeError("roll back")
    with transaction() as session:
        assert session.scalar(select(_EVENTS.c.seq).where(_EVENTS.c.type == "test.hot")) is None


def test_hot_statement__fires_the_engine_s_cursor_events(fresh_db: str) -> None:
    seen: list[tuple[str, str]] = []

    def before(_conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(("before", statement))

    def after(_conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(("after", statement))

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        with single_statement() as conn:
            HotStatement(select(true().label("t"))).rows(conn, {})
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
    assert [kind for kind, _ in seen] == ["before", "after"]
    assert seen[0][1].startswith("SELECT")


def test_hot_statement__a_constraint_violation_is_sqlalchemy_s_and_the_transaction_rolls_back(fresh_db: str) -> None:
    with transaction() as session:
        taken = store.create_principal(session, kind="human", name=f"taken-{store.new_id()}", token_hash=None)
        assert taken is not None
        name = taken.name
    duplicate = HotStatement(
        select(literal(1).label("one")).add_cte(
            insert(Principal.__table__)
            .values(id=bindparam("id"), kind="human", name=bindparam("name"), created_at=datetime.now(UTC))
            .cte("made")
        )
    )
    with pytest.raises(IntegrityError), transaction() as session:
        duplicate.rows(session, {"id": store.new_id(), "name": name})
    with transaction() as session:  # the pool's connection is usable again
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def test_hot_statement__a_dropped_connection_is_invalidated_and_said_so(fresh_db: str) -> None:
    with single_statement() as conn:
        conn.execute(text("SELECT 1"))  # the held connection exists, used moments ago (no ping before use)
    assert _kill_pooled_connections() >= 1
    with pytest.raises(DBAPIError) as caught, single_statement() as conn:
        HotStatement(select(true().label("t"))).rows(conn, {})
    assert caught.value.connection_invalidated
    with single_statement() as conn:  # a new connection takes its place, without failing first
        assert conn.execute(text("SELECT 1")).scalar_one() == 1


def test_hot_statement__refused_where_parameters_are_bound_by_position() -> None:
    from sqlalchemy.dialects import sqlite

    statement = HotStatement(select(_RUNS.c.id).where(_RUNS.c.id == bindparam("rid")))
    with pytest.raises(ValueError, match="named parameters"):
        statement._for(sqlite.dialect())


_PLAIN = "t.hot_plain"


@continuation(_PLAIN, version=1)
def _plain(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    return Complete(result={"go": answers["go"].value})


def _unwrapped(params: dict[str, Any]) -> dict[str, Any]:
    """The driver's JSON wrappers compare by identity: compare what they wrap."""
    return {k: (type(v).__name__, v.obj) if hasattr(v, "obj") else v for k, v in params.items()}


def test_hot_statement__parameters_are_sqlalchemy_s_for_every_hot_statement_of_a_run(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planned parameter loop gives what ``construct_params`` and the bind processors give, for each
    hot statement a run's claim, answer and run-ending consume send (and for a bind left to its value)."""
    from parkway.hot import _Compiled
    from tasks.sdk import answer
    from tests.integration.helpers import execute_ready, parked, ready
    from tests.support import HUMAN, new_response_id

    checked: list[str] = []
    planned = _Compiled.parameters

    def compared(self: _Compiled, given: Any) -> dict[str, Any]:
        expected = dict(self.compiled.construct_params(dict(given)))
        for b in self.binds:
            if b.process is not None:
                expected[b.name] = b.process(expected[b.name])
        got = planned(self, given)
        assert _unwrapped(got) == _unwrapped(expected)
        checked.append(self.sql.split("(", 1)[0][:40])
        return got

    monkeypatch.setattr(_Compiled, "parameters", compared)
    # A run that parks, is answered and ends plainly (no in_commit effect: the one-statement consume)
    run_id, asked = parked("t.ask_one", {"continuation": f"{_PLAIN}@1"})
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    assert len(ready(run_id)) == 1
    execute_ready(run_id)
    assert {"WITH claimed AS", "SELECT interactions.id, interactions.run", "WITH answered AS", "WITH consumed AS"} <= {
        c.strip() for c in checked
    }, checked
    with single_statement() as conn:  # a bind that keeps its own value (a literal in the statement)
        kept = select(_RUNS.c.id).where(_RUNS.c.id == bindparam("rid"), literal(3) == bindparam("n", 3))
        assert HotStatement(kept).rows(conn, {"rid": "-"}) == []
