"""lists and pages read in the order an index returns: per target, per status, by time

``GET /v1/interactions``, ``GET /v1/runs``-shaped reads (the run history list) and the Decisions page return
rows oldest (interactions) or newest (runs) first, a page at a time. Without an index in that order every
page sorted every row its filter let through. Now each read takes, per target the caller is granted on (and
per status when it lists them all), its first page from one of these ranges and merges them
(``models.paging``): the cost follows the targets and the page, not the table.

- ``ix_interactions_target_listed`` (target, status, created_at, id): a person's targets, a target filter;
- ``ix_interactions_listed`` (status, created_at, id): an admin's lists, an agent's own runs;
- ``ix_runs_target_listed`` (target, created_at, id) and ``ix_runs_listed`` (created_at, id): the runs a
  person or an admin may read, newest first.

None is keyed on ``runs.status`` or ``steps.status``: the runs indexes hold columns a run never changes, so a
run's status change stays an in-place (HOT) update (0002). An interaction's status change never was one.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_interactions_target_listed": ("interactions", ["target", "status", "created_at", "id"]),
    "ix_interactions_listed": ("interactions", ["status", "created_at", "id"]),
    "ix_runs_target_listed": ("runs", ["target", "created_at", "id"]),
    "ix_runs_listed": ("runs", ["created_at", "id"]),
}


def upgrade() -> None:
    for name, (table, columns) in INDEXES.items():
        op.create_index(name, table, columns, unique=False)


def downgrade() -> None:
    for name, (table, _) in INDEXES.items():
        op.drop_index(name, table_name=table)
