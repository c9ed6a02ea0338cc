"""a request's merged result, kept as opaque bytes made on a worker, or why it could not be

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("result", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("result_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("result_error")
        batch.drop_column("result")
