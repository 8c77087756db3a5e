"""drop three indexes that every event or delivery paid for: webhook_deliveries' (status,
next_attempt_at), rewritten on each of a delivery's three status changes, whose readers (the
depth gauge, both retention sweeps) now read the partial indexes or the oldest ids; its
event_id, which no query looks up; and events' created_at, which retention alone read (it
reads the oldest ids now: ids rise with commit time)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_deliveries_due", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_event_id", table_name="webhook_deliveries")
    op.drop_index("ix_events_created_at", table_name="events")


def downgrade() -> None:
    op.create_index("ix_events_created_at", "events", ["created_at"])
    op.create_index("ix_webhook_deliveries_event_id", "webhook_deliveries", ["event_id"])
    op.create_index("ix_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
