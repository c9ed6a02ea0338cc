"""when each packet got its slot on its worker, so that a file's run leaves out its queue

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: the packets stored before it have no such time, and keep none.
    with op.batch_alter_table("packets") as batch:
        batch.add_column(sa.Column("slotted", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("packets") as batch:
        batch.drop_column("slotted")
