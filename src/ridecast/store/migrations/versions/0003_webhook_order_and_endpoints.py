"""webhook delivery order flag and per-endpoint failing clock

Revision ID: 0003
Revises: 0007
Create Date: 2026-11-23 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("ordered", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch_op.add_column(sa.Column("claim_token", sa.String(length=32), nullable=True))
    op.create_table(
        "webhook_endpoints",
        sa.Column("simulation_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("failing_since", sa.Float(), nullable=False),
        sa.Column("last_failure_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("simulation_id", "url"),
    )


def downgrade() -> None:
    op.drop_table("webhook_endpoints")
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_column("claim_token")
        batch_op.drop_column("ordered")
