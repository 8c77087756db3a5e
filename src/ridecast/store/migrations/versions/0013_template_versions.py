"""templates can be changed and deleted: a version (for ETag/If-Match), updated_at, deleted_at

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN on both SQLite and PostgreSQL, no copy of the table; existing templates
    # start at version 1, never changed, not deleted.
    op.add_column("simulation_templates", sa.Column(
        "version", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("simulation_templates", sa.Column("updated_at", sa.Float(), nullable=True))
    op.add_column("simulation_templates", sa.Column("deleted_at", sa.Float(), nullable=True))


def downgrade() -> None:
    # A deleted template would come back to life: remove it for good instead.
    op.execute("DELETE FROM simulation_templates WHERE deleted_at IS NOT NULL "
               "AND id NOT IN (SELECT template_id FROM simulations "
               "WHERE template_id IS NOT NULL)")
    with op.batch_alter_table("simulation_templates", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
        batch_op.drop_column("updated_at")
        batch_op.drop_column("version")
