"""waiting unordered rows by URL and due time: a claim reads the rows of a URL that are due,
not every row waiting there for a retry

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# As in store/tables.py at this revision (a migration does not follow later edits there).
LOOSE_PENDING_WHERE = {
    "sqlite": "status = 'pending' AND ordered = 0",
    "postgresql": "status = 'pending' AND NOT ordered",
}
revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _loose(columns: list[str]) -> None:
    op.drop_index("ix_deliveries_loose", table_name="webhook_deliveries")
    op.create_index(
        "ix_deliveries_loose", "webhook_deliveries", columns,
        sqlite_where=sa.text(LOOSE_PENDING_WHERE["sqlite"]),
        postgresql_where=sa.text(LOOSE_PENDING_WHERE["postgresql"]),
    )


def upgrade() -> None:
    _loose(["url", "next_attempt_at", "event_id"])


def downgrade() -> None:
    _loose(["url", "event_id"])
