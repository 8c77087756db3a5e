"""failed and disabled deliveries by simulation: the delivery log's filters and counts of
them read these rows, not the simulation's whole history

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# As in store/tables.py at this revision (a migration does not follow later edits there).
ENDED_WHERE = "status IN ('failed', 'disabled')"
revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_deliveries_ended", "webhook_deliveries", ["simulation_id", "id"],
        sqlite_where=sa.text(ENDED_WHERE), postgresql_where=sa.text(ENDED_WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_ended", table_name="webhook_deliveries")
