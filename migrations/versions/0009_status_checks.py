"""statuses checked by the database: a CHECK constraint on every enum column

The database refuses a status (or kind, phase, replay class) that models/status.py does not name, so a
wrong word is an error at write time rather than a run no reader understands. Runs that old code left
with a legacy word get the canonical one first, so each constraint lists exactly its enum: the
warning that ``completed_with_persistence_error`` carried on read moves into ``runs.warnings``, and the
run reads exactly as before. A value that is neither stops the upgrade and is named. On SQLite the same
lists are enforced by triggers (see below).

The lists are this revision's enums, written out: a migration does not follow later changes to the code.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 13:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUN_STATUSES = ("running", "waiting", "completed", "failed", "canceled", "interrupted")
CHECKS: dict[str, dict[str, tuple[str, ...]]] = {  # table -> column -> the words it may hold
    "principals": {"kind": ("agent", "human", "admin")},
    "runs": {"status": RUN_STATUSES},
    "steps": {"status": ("running", "parked", "resuming", "completed", "failed", "canceled", "interrupted")},
    "interactions": {
        "kind": ("question", "permission"),
        "status": ("pending", "answered", "rejected", "canceled", "expired", "interrupted"),
    },
    "continuations": {"kind": ("start", "resume"), "status": ("ready", "claimed", "consumed", "dead")},
    "reviews": {"status": ("running", "completed", "failed", "interrupted")},
    "tool_calls": {"replay": ("safe", "never"), "phase": ("authorizing", "executing", "settled")},
    "schedule_history": {"status": ("completed", "failed", "canceled", "interrupted")},
}

# models.status.LEGACY_RUN_STATUS at this revision.
LEGACY = {
    "success": "completed",
    "succeeded": "completed",
    "error": "failed",
    "stopped": "canceled",
    "cancelled": "canceled",
    "completed_with_persistence_error": "completed",
}
WARNED = {"completed_with_persistence_error": "completed with a persistence error"}

runs = sa.table("runs", sa.column("id", sa.String), sa.column("status", sa.String), sa.column("warnings", sa.JSON))


def _name(table: str, column: str) -> str:
    return f"ck_{table}_{column}"


def _clause(column: str, words: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(word) for word in words)})"


def upgrade() -> None:
    bind = op.get_bind()
    for word, warning in WARNED.items():
        rows = bind.execute(sa.select(runs.c.id, runs.c.warnings).where(runs.c.status == word)).all()
        for run_id, warnings in rows:
            values = {"status": LEGACY[word], "warnings": [*(warnings or []), warning]}
            bind.execute(runs.update().where(runs.c.id == run_id).values(**values))
    for table in ("runs", "schedule_history"):  # the history row of a run projected by old code, too
        for word, canonical in LEGACY.items():
            op.execute(
                sa.text(f"UPDATE {table} SET status = :canonical WHERE status = :word").bindparams(
                    canonical=canonical, word=word
                )
            )

    unknown = []
    for table, columns in CHECKS.items():
        for column, words in columns.items():
            found = bind.execute(sa.text(f"SELECT DISTINCT {column} FROM {table} WHERE NOT ({_clause(column, words)})"))
            unknown += [f"{table}.{column} = {value!r}" for value in found.scalars()]
    if unknown:
        raise RuntimeError(f"rows hold words no Parkway status names; correct them, then migrate: {', '.join(unknown)}")

    sqlite = bind.dialect.name == "sqlite"
    for table, columns in CHECKS.items():
        for column, words in columns.items():
            if sqlite:
                _create_triggers(table, column, words)
            else:
                op.create_check_constraint(op.f(_name(table, column)), table, sa.text(_clause(column, words)))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table, columns in CHECKS.items():
        for column in columns:
            if sqlite:
                for trigger in _triggers(table, column):
                    op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            else:
                op.drop_constraint(op.f(_name(table, column)), table, type_="check")


# SQLite cannot add a CHECK to a table without copying it (batch mode), and a copy of a table other rows refer
# to (principals, runs, steps) needs foreign keys off, which cannot be switched inside this migration's
# transaction. Triggers refuse the same words in place, until SQLite goes (issue 18).
def _triggers(table: str, column: str) -> tuple[str, str]:
    return f"{_name(table, column)}_insert", f"{_name(table, column)}_update"


def _create_triggers(table: str, column: str, words: tuple[str, ...]) -> None:
    on_insert, on_update = _triggers(table, column)
    for trigger, event in ((on_insert, "INSERT"), (on_update, f"UPDATE OF {column}")):
        op.execute(
            f"CREATE TRIGGER {trigger} BEFORE {event} ON {table} FOR EACH ROW "
            f"WHEN NOT (NEW.{_clause(column, words)}) "
            f"BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: {_name(table, column)}'); END"
        )
