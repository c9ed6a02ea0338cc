"""when each packet began on its worker, so that the ETAs measure a job's start on a node

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: the packets stored before it have no such time, and keep none.
    with op.batch_alter_table("packets") as batch:
        batch.add_column(sa.Column("started", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("packets") as batch:
        batch.drop_column("started")
