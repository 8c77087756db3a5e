"""partial indexes for claiming webhook deliveries: active ordered rows by lane, waiting
unordered rows by URL

Revision ID: 0008
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# As in store/tables.py at this revision (a migration does not follow later edits there).
LANE_ROWS_WHERE = {
    "sqlite": "status IN ('pending', 'delivering') AND ordered = 1",
    "postgresql": "status IN ('pending', 'delivering') AND ordered",
}
LOOSE_PENDING_WHERE = {
    "sqlite": "status = 'pending' AND ordered = 0",
    "postgresql": "status = 'pending' AND NOT ordered",
}
revision = "0008"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_deliveries_lanes", "webhook_deliveries", ["simulation_id", "event_id"],
        sqlite_where=sa.text(LANE_ROWS_WHERE["sqlite"]),
        postgresql_where=sa.text(LANE_ROWS_WHERE["postgresql"]),
    )
    op.create_index(
        "ix_deliveries_loose", "webhook_deliveries", ["url", "event_id"],
        sqlite_where=sa.text(LOOSE_PENDING_WHERE["sqlite"]),
        postgresql_where=sa.text(LOOSE_PENDING_WHERE["postgresql"]),
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_loose", table_name="webhook_deliveries")
    op.drop_index("ix_deliveries_lanes", table_name="webhook_deliveries")
