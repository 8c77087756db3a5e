"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:54:42.885624
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("events",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("simulation_id", sa.Integer(), nullable=False),
    sa.Column("message_type", sa.String(length=40), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_created_at", ["created_at"], unique=False)
        batch_op.create_index("ix_events_sim_id", ["simulation_id", "id"], unique=False)
        batch_op.create_index("ix_events_sim_type_id", ["simulation_id", "message_type", "id"], unique=False)

    op.create_table("organisations",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("name", sa.String(length=200), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("name")
    )
    op.create_table("webhook_attempts",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("delivery_id", sa.BigInteger(), nullable=False),
    sa.Column("started_at", sa.Float(), nullable=False),
    sa.Column("latency_ms", sa.Float(), nullable=True),
    sa.Column("status_code", sa.Integer(), nullable=True),
    sa.Column("error_class", sa.String(length=32), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("response_body", sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhook_attempts_delivery_id"), ["delivery_id"], unique=False)

    op.create_table("webhook_deliveries",
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
    sa.Column("event_id", sa.BigInteger(), nullable=False),
    sa.Column("simulation_id", sa.Integer(), nullable=False),
    sa.Column("message_type", sa.String(length=40), nullable=False),
    sa.Column("url", sa.Text(), nullable=False),
    sa.Column("status", sa.String(length=16), nullable=False),
    sa.Column("attempt_count", sa.Integer(), nullable=False),
    sa.Column("next_attempt_at", sa.Float(), nullable=False),
    sa.Column("lease_until", sa.Float(), nullable=True),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.Column("last_error", sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_due", ["status", "next_attempt_at"], unique=False)
        batch_op.create_index("ix_deliveries_sim", ["simulation_id", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_webhook_deliveries_event_id"), ["event_id"], unique=False)

    op.create_table("users",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("name", sa.String(length=200), nullable=False),
    sa.Column("org_id", sa.Integer(), nullable=False),
    sa.Column("is_admin", sa.Boolean(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("revoked_at", sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(["org_id"], ["organisations.id"], ),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("name")
    )
    op.create_table("api_keys",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("user_id", sa.Integer(), nullable=False),
    sa.Column("key_hash", sa.String(length=64), nullable=False),
    sa.Column("prefix", sa.String(length=16), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("revoked_at", sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(["user_id"], ["users.id"], ),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("key_hash")
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_user_id"), ["user_id"], unique=False)

    op.create_table("simulation_templates",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("name", sa.String(length=200), nullable=False),
    sa.Column("data", sa.JSON(), nullable=False),
    sa.Column("owner_id", sa.Integer(), nullable=False),
    sa.Column("org_id", sa.Integer(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(["org_id"], ["organisations.id"], ),
    sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("simulation_templates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_simulation_templates_org_id"), ["org_id"], unique=False)

    op.create_table("tokens",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("token_hash", sa.String(length=64), nullable=False),
    sa.Column("user_id", sa.Integer(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("expires_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(["user_id"], ["users.id"], ),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("token_hash")
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tokens_user_id"), ["user_id"], unique=False)

    op.create_table("simulations",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("name", sa.String(length=200), nullable=False),
    sa.Column("data", sa.JSON(), nullable=False),
    sa.Column("template_id", sa.Integer(), nullable=True),
    sa.Column("owner_id", sa.Integer(), nullable=False),
    sa.Column("org_id", sa.Integer(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.Column("deleted_at", sa.Float(), nullable=True),
    sa.Column("webhook_disabled_at", sa.Float(), nullable=True),
    sa.Column("webhook_disabled_reason", sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(["org_id"], ["organisations.id"], ),
    sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ),
    sa.ForeignKeyConstraint(["template_id"], ["simulation_templates.id"], ),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("simulations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_simulations_org_id"), ["org_id"], unique=False)



def downgrade() -> None:
    with op.batch_alter_table("simulations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_simulations_org_id"))

    op.drop_table("simulations")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tokens_user_id"))

    op.drop_table("tokens")
    with op.batch_alter_table("simulation_templates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_simulation_templates_org_id"))

    op.drop_table("simulation_templates")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_user_id"))

    op.drop_table("api_keys")
    op.drop_table("users")
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_deliveries_event_id"))
        batch_op.drop_index("ix_deliveries_sim")
        batch_op.drop_index("ix_deliveries_due")

    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_attempts_delivery_id"))

    op.drop_table("webhook_attempts")
    op.drop_table("organisations")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_sim_type_id")
        batch_op.drop_index("ix_events_sim_id")
        batch_op.drop_index("ix_events_created_at")

    op.drop_table("events")
