"""one trace per decision: the trace context a wait, a continuation and an event carry

When tracing is set up (docs/operations.md "Tracing"): ``interactions.traceparent`` the park's span,
``continuations.traceparent`` the span that made it due and ``claimed_trace`` the last execution's (a re-drive
links to both), ``events.trace_id`` the trace of the change it records. All nullable: untraced, they stay NULL.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns with no default change only the catalog, under an ACCESS EXCLUSIVE lock of each table:
    # a queued lock would hold answers back, so the wait for it is bounded (past it, nothing changed; run again).
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.add_column("interactions", sa.Column("traceparent", sa.String(length=55), nullable=True))
    op.add_column("continuations", sa.Column("traceparent", sa.String(length=55), nullable=True))
    op.add_column("continuations", sa.Column("claimed_trace", sa.String(length=55), nullable=True))
    op.add_column("events", sa.Column("trace_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column("events", "trace_id")
    op.drop_column("continuations", "claimed_trace")
    op.drop_column("continuations", "traceparent")
    op.drop_column("interactions", "traceparent")
