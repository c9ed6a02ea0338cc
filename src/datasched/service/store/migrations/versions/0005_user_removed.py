"""when a user was removed: their token refused, their requests kept with their name

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: null is a user not removed, as every user stored before it is.
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("removed", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("removed")
