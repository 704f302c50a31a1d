"""four single-column indexes dropped: each is the leading column of a unique index that serves it

Every insert into a table, and every update of a row that is not in place, writes an entry into each of
the table's indexes. These four are never needed: ``ix_interactions_step_id``, ``ix_runs_owner_id`` and
``ix_steps_run_id`` lead ``uq_interactions_step_id_key``, ``uq_runs_owner_id_idempotency_key`` and
``uq_steps_run_id_seq``, which answer the same lookups; ``ix_continuations_run_id`` served only the
interruption of a run, which now finds the run's continuations through its steps. An answered
continuation wrote 6 entries into them (its interaction's answer, its continuation's insert, claim and
consume, its run's end and projection flag).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 05:40:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DROPPED = {
    "interactions": ("ix_interactions_step_id", "step_id"),
    "runs": ("ix_runs_owner_id", "owner_id"),
    "steps": ("ix_steps_run_id", "run_id"),
    "continuations": ("ix_continuations_run_id", "run_id"),
}


def upgrade() -> None:
    for table, (index, _column) in DROPPED.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(index))


def downgrade() -> None:
    for table, (index, column) in DROPPED.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(batch_op.f(index), [column], unique=False)
