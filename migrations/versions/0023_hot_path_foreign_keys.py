"""the hot path's referential checks dropped: no completion looks up the rows it was written beside

Each completion (answer → continuation → run completed) ran nine foreign-key checks inside PostgreSQL, a
``SELECT … FOR KEY SHARE`` of the referenced row each: ``runs`` seven times (five events, the continuation,
the schedule-history row), ``steps`` once (the continuation) and ``principals`` once (the answerer). Every
one of those rows is written by the same statement, or read by it under the step's lock (the answerer's
authority), and no run, step or principal is ever deleted (the store has no such statement). The checks
guarded nothing the store could break, and cost 0.15 ms of PostgreSQL's 1.3 to 1.6 ms per completion (issue
20's ``no-foreign-keys``; bench/RESULTS.md, "Issue 42"). The indexes stay: ``events`` by (run_id, seq),
continuations by (step_id, kind).

Live: dropping a constraint changes only the catalog (no row is read or rewritten), but takes an ACCESS
EXCLUSIVE lock on both tables of each key until the migration commits. ``lock_timeout`` bounds the wait for
it to one second, so a queued lock never holds answers back longer than that; past it the migration fails,
nothing changed, and is run again. Code of the previous revision runs unchanged on this schema.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 06:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, referred table): the keys a completion checked.
KEYS = (
    ("events", "run_id", "runs"),
    ("continuations", "run_id", "runs"),
    ("continuations", "step_id", "steps"),
    ("schedule_history", "run_id", "runs"),
    ("interactions", "answered_by_id", "principals"),
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    for table, column, referred in KEYS:
        op.drop_constraint(f"fk_{table}_{column}_{referred}", table, type_="foreignkey")


def downgrade() -> None:
    for table, column, referred in KEYS:
        # NOT VALID, then validated: the check of existing rows takes no lock that stops writes.
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT fk_{table}_{column}_{referred} "
            f"FOREIGN KEY ({column}) REFERENCES {referred} (id) NOT VALID"
        )
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT fk_{table}_{column}_{referred}")
