"""Alembic's environment for the store: the engine comes from the caller
(:func:`datasched.service.store.db.upgrade`), the target schema from the ORM models."""

from __future__ import annotations

from alembic import context

from datasched.service.store.models import Base

config = context.config
engine = config.attributes["engine"]
with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    context.run_migrations()
