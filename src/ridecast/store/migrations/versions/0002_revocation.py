"""revocation epoch, key of each token, last use of each key

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("auth_state",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("revocation_epoch", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    )
    op.execute("INSERT INTO auth_state (id, revocation_epoch) VALUES (1, 0)")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_used_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("last_used_at")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("key_id")
    op.drop_table("auth_state")
