"""simulator_journal and the run's spec and progress in simulator_runs: what another node
needs to rebuild a run exactly (seed, start and settings, the operations sent to it and the
simulated time each applied at, and how many of its events are already published)

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("simulator_journal",
    sa.Column("run_id", sa.String(length=32), nullable=False),
    sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
    sa.Column("simulation_id", sa.Integer(), nullable=False),
    sa.Column("sim_t", sa.Float(precision=53), nullable=False),
    sa.Column("command", sa.String(length=32), nullable=False),
    sa.Column("args_json", sa.Text(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    with op.batch_alter_table("simulator_journal", schema=None) as batch_op:
        batch_op.create_index("ix_simulator_journal_simulation", ["simulation_id"],
                              unique=False)
    with op.batch_alter_table("simulator_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("spec_json", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("progress_json", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("simulator_runs", schema=None) as batch_op:
        batch_op.drop_column("progress_json")
        batch_op.drop_column("spec_json")
        batch_op.drop_column("run_id")
    with op.batch_alter_table("simulator_journal", schema=None) as batch_op:
        batch_op.drop_index("ix_simulator_journal_simulation")
    op.drop_table("simulator_journal")
