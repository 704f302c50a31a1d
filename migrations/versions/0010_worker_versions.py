"""workers advertise what they run; a wait fails closed only on a version no live worker has advertised

Each worker records the step names and continuation keys it runs, with a heartbeat on the database's
clock (``workers``, a row per worker process, live while ``expires_at`` is ahead); ``advertised_versions``
keeps when each key was last advertised, after its last worker stopped too: the grace of
``PARKWAY_VERSION_GRACE_S`` counts from there. The keys in use at upgrade are recorded as advertised now,
so every wait gets one grace period to be served by the upgraded fleet.

A pending interaction names the continuation its step resumes (``interactions.continuation``; the pending
ones are filled in from their step), and ``ix_interactions_pending_continuation`` is keyed by it: the sweep
finds the keys parked on by a skip scan of that index and the waits of a key no live worker runs by a range
of it, so its cost follows the waits it ends, not the waits that stay.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 19:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("steps", postgresql.ARRAY(sa.String(length=200)), nullable=False),
        sa.Column("continuations", postgresql.ARRAY(sa.String(length=200)), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_table(
        "advertised_versions",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('start', 'resume')", name=op.f("ck_advertised_versions_kind")),
        sa.PrimaryKeyConstraint("kind", "key", name=op.f("pk_advertised_versions")),
    )
    op.add_column("interactions", sa.Column("continuation", sa.String(length=200), nullable=True))
    op.execute(
        "UPDATE interactions AS i SET continuation = s.continuation FROM steps AS s "
        "WHERE s.id = i.step_id AND i.status = 'pending'"
    )
    op.create_index(
        "ix_interactions_pending_continuation",
        "interactions",
        ["continuation", "created_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending' AND continuation IS NOT NULL"),
    )
    # What is in use now counts as advertised now: one grace period for the upgraded workers to claim it.
    op.execute(
        "INSERT INTO advertised_versions (kind, key, last_seen_at) "
        "SELECT DISTINCT 'resume', continuation, now() FROM interactions "
        "WHERE status = 'pending' AND continuation IS NOT NULL "
        "UNION SELECT DISTINCT kind, name, now() FROM continuations WHERE status IN ('ready', 'claimed')"
    )


def downgrade() -> None:
    op.drop_index("ix_interactions_pending_continuation", table_name="interactions")
    op.drop_column("interactions", "continuation")
    op.drop_table("advertised_versions")
    op.drop_table("workers")
