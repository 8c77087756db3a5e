"""units in flight read from a partial index of leased deliveries (by claim token)

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# As in store/tables.py at this revision (a migration does not follow later edits there).
LEASED_WHERE = "status = 'delivering'"
revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_deliveries_leased", "webhook_deliveries",
        ["claim_token", "lease_until", "url", "simulation_id", "ordered"],
        sqlite_where=sa.text(LEASED_WHERE), postgresql_where=sa.text(LEASED_WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_leased", table_name="webhook_deliveries")
