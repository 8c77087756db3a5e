"""simulator_runs: the lease that makes one node the owner of a simulator run

Revision ID: 0006
Revises: 0002
Create Date: 2026-11-23 08:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("simulator_runs",
    sa.Column("simulation_id", sa.Integer(), autoincrement=False, nullable=False),
    sa.Column("owner_node", sa.String(length=64), nullable=False),
    sa.Column("lease_until", sa.Float(), nullable=False),
    sa.Column("status", sa.String(length=16), nullable=False),
    sa.Column("status_json", sa.JSON(), nullable=False),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("simulation_id"),
    )
    with op.batch_alter_table("simulator_runs", schema=None) as batch_op:
        batch_op.create_index("ix_simulator_runs_owner", ["owner_node"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("simulator_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_simulator_runs_owner")
    op.drop_table("simulator_runs")
