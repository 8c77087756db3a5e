"""a delivery's latest successful attempt on its own row (no webhook_attempts row for it)

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("success_started_at", sa.Float()),
    ("success_latency_ms", sa.Float()),
    ("success_status_code", sa.Integer()),
    ("success_response_body", sa.Text()),
)


def upgrade() -> None:
    # Nullable columns without a default: ALTER TABLE ADD COLUMN on both SQLite and
    # PostgreSQL, no copy of the table.
    for name, type_ in _COLUMNS:
        op.add_column("webhook_deliveries", sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    # Successes kept on the rows become attempt rows again, so the log loses nothing.
    op.execute(
        "INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, status_code, "
        "error_class, error, response_body) SELECT id, success_started_at, "
        "success_latency_ms, success_status_code, NULL, NULL, success_response_body "
        "FROM webhook_deliveries WHERE success_started_at IS NOT NULL"
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        for name, _type in reversed(_COLUMNS):
            batch_op.drop_column(name)
