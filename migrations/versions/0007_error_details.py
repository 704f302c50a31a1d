"""runs.error_details: a failed run's Fail details (or partial-failure context) apart from its result

A failed run has ``result: null``. Until now ``Fail(error, details)`` stored ``{"details": details}`` in
``result`` (and a step that returned ``Complete`` while its review ran, its partial-failure context):
those values move to ``error_details`` and the failed runs' ``result`` becomes null.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FAILED = ("failed", "error")  # "error" is the legacy word for failed (normalized on read)

runs = sa.table(
    "runs",
    sa.column("id", sa.String),
    sa.column("status", sa.String),
    sa.column("result", sa.JSON),
    sa.column("error_details", sa.JSON),
)


def upgrade() -> None:
    # In place, not a batch: SQLite's batch mode copies the table and would lose 0006's index on an expression.
    op.add_column("runs", sa.Column("error_details", sa.JSON(), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(runs.c.id, runs.c.result).where(runs.c.status.in_(FAILED), runs.c.result.is_not(None))
    ).all()
    for run_id, result in rows:
        details = result["details"] if isinstance(result, dict) and set(result) == {"details"} else result
        bind.execute(runs.update().where(runs.c.id == run_id).values(result=sa.null(), error_details=details))


def downgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.select(runs.c.id, runs.c.error_details).where(runs.c.error_details.is_not(None))).all()
    for run_id, details in rows:
        bind.execute(runs.update().where(runs.c.id == run_id).values(result={"details": details}))
    op.execute("ALTER TABLE runs DROP COLUMN error_details")  # in place on SQLite too (3.35+)
