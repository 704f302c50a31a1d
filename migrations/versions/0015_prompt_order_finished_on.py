"""a step's prompts in the order it declared them; who finished a run, as a person reads it

- ``interactions.position``: the interaction's place in the ``Park`` that asked it (0, 1, 2 …; 0 for those
  asked one at a time, a tool's permission). A step's interactions share ``created_at`` (the park's
  transaction time), so their order was their ids' (hashes): lists now order by (created_at, position, id),
  and the two listing indexes of 0012 carry the position in that order.
- ``runs.finished_on``: the process that committed the run's terminal state, ``<node> pid <pid>`` (a
  worker's Celery node name), beside ``finished_by`` (the execution's id, which projections compare).
- ``runs.title``: what the run is about, as a step said it (``ctx.set_title``), for its cards and page.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The listing indexes of 0012, without and with the position (before the id, as the lists order).
LISTED = {
    "ix_interactions_target_listed": ["target", "status", "created_at"],
    "ix_interactions_listed": ["status", "created_at"],
}


def _listed(*order: str) -> None:
    for name, columns in LISTED.items():
        op.drop_index(name, table_name="interactions")
        op.create_index(name, "interactions", [*columns, *order])


def upgrade() -> None:
    op.add_column("interactions", sa.Column("position", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("runs", sa.Column("finished_on", sa.String(length=200), nullable=True))
    op.add_column("runs", sa.Column("title", sa.String(length=200), nullable=True))
    _listed("position", "id")


def downgrade() -> None:
    _listed("id")
    op.drop_column("runs", "title")
    op.drop_column("runs", "finished_on")
    op.drop_column("interactions", "position")
