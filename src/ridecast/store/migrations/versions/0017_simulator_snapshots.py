"""simulator_snapshots: a run's engine state at a point, so that a takeover replays only the
journal after it (the newest few per run)

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("simulator_snapshots",
    sa.Column("run_id", sa.String(length=32), nullable=False),
    sa.Column("sim_t", sa.Float(precision=53), nullable=False),
    sa.Column("simulation_id", sa.Integer(), nullable=False),
    sa.Column("format_version", sa.Integer(), nullable=False),
    sa.Column("journal_seq", sa.Integer(), nullable=False),
    sa.Column("event_count", sa.BigInteger(), nullable=False),
    sa.Column("last_event_id", sa.BigInteger(), nullable=True),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("run_id", "sim_t"),
    )
    with op.batch_alter_table("simulator_snapshots", schema=None) as batch_op:
        batch_op.create_index("ix_simulator_snapshots_simulation", ["simulation_id"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("simulator_snapshots", schema=None) as batch_op:
        batch_op.drop_index("ix_simulator_snapshots_simulation")
    op.drop_table("simulator_snapshots")
