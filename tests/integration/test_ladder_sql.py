"""bench.ladder's rungs (bench/ladder_sql.py): each rung's statements complete one wait exactly once, write
the events and terminal truth its rung adds, and (from L4 on) refuse a caller with no live grant."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from bench import ladder_sql


def _one(conn: psycopg.Connection[Any], sql: str, **params: Any) -> Any:
    return conn.execute(sql, params).fetchone()


@pytest.mark.parametrize("rung", ladder_sql.RUNGS)
def test_a_rung_completes_a_wait_exactly_once(fresh_db: str, rung: int) -> None:
    with psycopg.connect(fresh_db.replace("+psycopg", ""), autocommit=True) as conn:
        for statement in ladder_sql.ddl(rung):
            conn.execute(statement)
        for statement in ladder_sql.seed(rung):
            conn.execute(statement, {"first": 1, "last": 2})
        answer = {"id": 1, "value": '{"answer": "yes"}', "who": ladder_sql.ANSWERER, "response_id": "r1"}
        if rung >= 4:  # a caller with no principal, and one whose grant was revoked, close nothing
            assert _one(conn, ladder_sql.answer(rung), **{**answer, "who": "nobody"}) is None
            conn.execute(f"UPDATE l{rung}_grants SET revoked_at = now() WHERE principal_id = 2")
            assert _one(conn, ladder_sql.answer(rung), **answer) is None
            conn.execute(f"UPDATE l{rung}_grants SET revoked_at = NULL")
        assert _one(conn, ladder_sql.answer(rung), **answer) is not None
        assert _one(conn, ladder_sql.answer(rung), **{**answer, "response_id": "r2"}) is None
        claimed = _one(conn, ladder_sql.claim(rung), id=1)
        assert claimed is not None and claimed[0] == {"answer": "yes"}
        assert _one(conn, ladder_sql.claim(rung), id=1) is None
        consume = {"id": 1, "execution": "e1", "result": json.dumps({"value": "yes"})}
        ended = _one(conn, ladder_sql.consume(rung), **consume)
        assert ended is not None and ended[0] == 1 and ended[1] == "completed"
        assert _one(conn, ladder_sql.consume(rung), **consume) is None
        assert _one(conn, ladder_sql.done(rung), first=1, last=2)[0] == 1
        batches = conn.execute(f"SELECT first_seq, events FROM l{rung}_events WHERE run_id = 1 ORDER BY 1").fetchall()
        assert [[e["type"] for e in events] for _, events in batches] == [
            ["interaction.answered", "continuation.ready"],
            ["step.resumed", "step.completed", "run.completed"],
        ]
        assert all(seq & 0xFFFF == 1 for seq, _ in batches) and batches[0][0] < batches[1][0]
        if rung >= 3:
            run = _one(conn, f"SELECT status, completed_at IS NOT NULL, execution_id FROM l{rung}_runs WHERE id = 1")
            assert run == ("completed", True, "e1")
            step = _one(conn, f"SELECT status, result FROM l{rung}_steps WHERE id = 1")
            assert step == ("completed", {"value": "yes"})
