"""Count and time what an engine sends to the database: statements, transactions, pool checkouts."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import Any

from sqlalchemy import Engine, event


def _short(statement: str) -> str:
    one = re.sub(r"\s+", " ", statement).strip()
    return one if len(one) <= 160 else one[:157] + "..."


class StatementProfile:
    """Records every statement the engines execute (with its duration), commits, rollbacks and
    connection checkouts (a connection idle for over ``parkway.db.PING_AFTER_IDLE_S`` is pinged at checkout)."""

    def __init__(self, *engines: Engine) -> None:
        self.engines = engines
        self.statements: list[tuple[str, Any, float]] = []
        self.commits = 0
        self.rollbacks = 0
        self.checkouts = 0
        self.savepoints = 0
        self._starts: dict[int, float] = {}

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        self._starts[id(cursor)] = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        started = self._starts.pop(id(cursor), time.perf_counter())
        self.statements.append((statement, params, (time.perf_counter() - started) * 1000))

    def _commit(self, conn: Any) -> None:
        self.commits += 1

    def _rollback(self, conn: Any) -> None:
        self.rollbacks += 1

    def _savepoint(self, conn: Any, name: Any) -> None:
        self.savepoints += 1

    def _checkout(self, dbapi_conn: Any, record: Any, proxy: Any) -> None:
        self.checkouts += 1

    def _hooks(self) -> list[tuple[Any, str, Any]]:
        return [
            hook
            for engine in self.engines
            for hook in (
                (engine, "before_cursor_execute", self._before),
                (engine, "after_cursor_execute", self._after),
                (engine, "commit", self._commit),
                (engine, "rollback", self._rollback),
                (engine, "savepoint", self._savepoint),
                (engine.pool, "checkout", self._checkout),
            )
        ]

    def __enter__(self) -> StatementProfile:
        for target, name, fn in self._hooks():
            event.listen(target, name, fn)
        return self

    def __exit__(self, *_: object) -> None:
        for target, name, fn in self._hooks():
            event.remove(target, name, fn)

    def counts(self) -> dict[str, Any]:
        return {
            "statements": len(self.statements),
            "commits": self.commits,
            "rollbacks": self.rollbacks,
            "savepoints": self.savepoints,
            "checkouts": self.checkouts,
            "statement_ms": round(sum(ms for _, _, ms in self.statements), 3),
        }

    def summary(self, *, explain: Engine | None = None, top: int = 12) -> dict[str, Any]:
        """Counts, the statements grouped by text (count, total ms), and optionally the plans of the
        slowest SELECTs (``EXPLAIN (ANALYZE, BUFFERS)`` inside a rolled-back transaction)."""
        groups: dict[str, list[float]] = defaultdict(list)
        first_params: dict[str, tuple[str, Any]] = {}
        for statement, params, ms in self.statements:
            key = _short(statement)
            groups[key].append(ms)
            first_params.setdefault(key, (statement, params))
        ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]
        out: dict[str, Any] = {
            **self.counts(),
            "by_statement": [
                {"sql": sql, "count": len(v), "total_ms": round(sum(v), 3), "max_ms": round(max(v), 3)}
                for sql, v in ranked
            ],
        }
        if explain is not None:
            plans = []
            for sql, _ in ranked[:4]:
                statement, params = first_params[sql]
                if not statement.lstrip().upper().startswith("SELECT"):
                    continue
                with explain.connect() as conn:
                    trans = conn.begin()
                    try:
                        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).all()
                        plans.append({"sql": sql, "plan": [r[0] for r in rows]})
                    except Exception as exc:
                        plans.append({"sql": sql, "error": f"{type(exc).__name__}: {exc}"})
                    finally:
                        trans.rollback()
            out["plans"] = plans
        return out
