"""the initial schema: users, groups, requests, jobs, packets, catalog

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("year", sa.Integer(), nullable=True),
        sa.Column("system", sa.String(length=64), nullable=True),
        sa.Column("energy_gev", sa.Float(), nullable=True),
        sa.Column("detector", sa.String(length=256), nullable=True),
        sa.Column("trigger", sa.String(length=256), nullable=True),
        sa.Column("keywords", sa.JSON(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("quota", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=1024), nullable=False),
        sa.Column("tree", sa.String(length=256), nullable=True),
        sa.Column("n_events", sa.BigInteger(), nullable=False),
        sa.Column("n_bytes", sa.BigInteger(), nullable=False),
        sa.Column("cached_on", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("url"),
    )
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_files_dataset_id"), ["dataset_id"], unique=False)

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("token_salt", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_id"),
    )
    op.create_table(
        "requests",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.Column("content_type", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=True),
        sa.Column("split", sa.String(length=16), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_requests_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_requests_state"), ["state"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=48), nullable=False),
        sa.Column("request_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("work", sa.JSON(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("failed_file", sa.String(length=1024), nullable=True),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["requests.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_request_id"), ["request_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_state"), ["state"], unique=False)

    op.create_table(
        "packets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=48), nullable=False),
        sa.Column("url", sa.String(length=1024), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("stop", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("n_bytes", sa.BigInteger(), nullable=False),
        sa.Column("cpu_s", sa.Float(), nullable=False),
        sa.Column("result", sa.LargeBinary(), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "url", "start", name="uq_packet_range"),
    )
    with op.batch_alter_table("packets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_packets_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("packets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_packets_job_id"))

    op.drop_table("packets")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_state"))
        batch_op.drop_index(batch_op.f("ix_jobs_request_id"))

    op.drop_table("jobs")
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_requests_state"))
        batch_op.drop_index(batch_op.f("ix_requests_owner_id"))

    op.drop_table("requests")
    op.drop_table("users")
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_files_dataset_id"))

    op.drop_table("files")
    op.drop_table("groups")
    op.drop_table("datasets")
