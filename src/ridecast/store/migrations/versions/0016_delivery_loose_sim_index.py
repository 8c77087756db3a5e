"""waiting unordered rows by simulation: the delivery log's pending reads and a simulation's
backlog read that simulation's rows, not every simulation's waiting ones

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# As in store/tables.py at this revision (a migration does not follow later edits there).
LOOSE_PENDING_WHERE = {
    "sqlite": "status = 'pending' AND ordered = 0",
    "postgresql": "status = 'pending' AND NOT ordered",
}
revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_deliveries_loose_sim", "webhook_deliveries", ["simulation_id", "id"],
        sqlite_where=sa.text(LOOSE_PENDING_WHERE["sqlite"]),
        postgresql_where=sa.text(LOOSE_PENDING_WHERE["postgresql"]),
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_loose_sim", table_name="webhook_deliveries")
