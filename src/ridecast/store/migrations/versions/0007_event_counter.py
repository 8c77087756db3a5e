"""event_counter: event ids taken in commit order from one row, on every backend

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("event_counter",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("last_id", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    )
    bind = op.get_bind()
    # Start after every id ever handed out (retention may have emptied the table, and ids
    # are cursors: never reuse one).
    last = bind.execute(sa.text("SELECT MAX(id) FROM events")).scalar() or 0
    if bind.dialect.name == "sqlite":
        seq = bind.execute(
            sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
        ).scalar()
    else:
        seq = bind.execute(sa.text(
            "SELECT last_value FROM pg_sequences WHERE sequencename = "
            "(SELECT split_part(pg_get_serial_sequence('events', 'id'), '.', 2))"
        )).scalar()
    op.execute(sa.text("INSERT INTO event_counter (id, last_id) VALUES (1, :last)")
               .bindparams(last=max(int(last), int(seq or 0))))


def downgrade() -> None:
    op.drop_table("event_counter")
