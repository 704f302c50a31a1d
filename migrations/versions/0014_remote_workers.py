"""remote workers: a worker principal kind, continuations served only outside Celery, lease receipts

A remote worker (any process, any language) leases work over HTTP (docs/worker-protocol.md). Its lease calls
advertise what it serves in ``workers`` (``remote``: not a Celery node, nothing is ever handed on to it). A
continuation made while only remote workers serve its key is ``remote``: never published to Celery, never
claimed by a Celery worker, leased through ``ix_continuations_remote`` (by key, oldest first); the sweep's
re-publish index leaves those rows out. A completion's receipt is kept in ``lease_receipts``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 21:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint(op.f("ck_principals_kind"), "principals", type_="check")
    op.create_check_constraint(
        op.f("ck_principals_kind"), "principals", "kind IN ('agent', 'human', 'admin', 'worker')"
    )
    op.add_column("workers", sa.Column("remote", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    op.add_column("continuations", sa.Column("remote", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    op.drop_index("ix_continuations_ready", table_name="continuations")
    op.create_index(
        "ix_continuations_ready",
        "continuations",
        ["enqueued_at"],
        unique=False,
        postgresql_where=sa.text("status = 'ready' AND NOT remote"),
    )
    op.create_index(
        "ix_continuations_remote",
        "continuations",
        ["name", "created_at"],
        unique=False,
        postgresql_where=sa.text("remote AND status IN ('ready', 'claimed')"),
    )
    op.create_table(
        "lease_receipts",
        sa.Column("lease_id", sa.String(length=64), nullable=False),
        sa.Column("continuation_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("outcome_digest", sa.String(length=64), nullable=False),
        sa.Column("run_status", sa.String(length=16), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["continuation_id"], ["continuations.id"], name=op.f("fk_lease_receipts_continuation_id_continuations")
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_lease_receipts_run_id_runs")),
        sa.ForeignKeyConstraint(["step_id"], ["steps.id"], name=op.f("fk_lease_receipts_step_id_steps")),
        sa.PrimaryKeyConstraint("lease_id", name=op.f("pk_lease_receipts")),
    )


def downgrade() -> None:
    op.drop_table("lease_receipts")
    op.drop_index("ix_continuations_remote", table_name="continuations")
    op.drop_index("ix_continuations_ready", table_name="continuations")
    op.create_index(
        "ix_continuations_ready",
        "continuations",
        ["enqueued_at"],
        unique=False,
        postgresql_where=sa.text("status = 'ready'"),
    )
    op.drop_column("continuations", "remote")
    op.drop_column("workers", "remote")
    op.execute("DELETE FROM principals WHERE kind = 'worker'")
    op.drop_constraint(op.f("ck_principals_kind"), "principals", type_="check")
    op.create_check_constraint(op.f("ck_principals_kind"), "principals", "kind IN ('agent', 'human', 'admin')")
