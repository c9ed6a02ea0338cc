"""Where the store lives: an SQLAlchemy engine for a database URL (SQLite by default, in WAL
mode; PostgreSQL through psycopg 3), sessions, and the schema brought to Alembic's head.

The migrations ship inside the package (``migrations/``), so ``datasched serve`` upgrades
any store it opens to the schema of the code that runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "MIGRATIONS",
    "Store",
    "StoreError",
    "database_url",
    "make_engine",
    "upgrade",
]

MIGRATIONS = Path(__file__).with_name("migrations")
"""The Alembic scripts of the store (package data)."""


class StoreError(ValueError):
    """A database URL that cannot be used; the message says why."""


def database_url(url_or_path: str) -> str:
    """A database URL: a URL as given (``postgresql://...`` becomes psycopg 3's dialect), or
    a file path for SQLite."""
    if "://" not in url_or_path:
        return f"sqlite:///{Path(url_or_path).expanduser().absolute()}"
    if url_or_path.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url_or_path.split("://", 1)[1]
    return url_or_path


def make_engine(url_or_path: str, *, immediate: bool = True) -> Engine:
    """An engine for the store at ``url_or_path``. SQLite files get WAL mode (readers do not
    block the writer), transactions that take the write lock when they begin, and a busy
    timeout, since the API and the runner's reports write from different threads. With
    ``immediate`` false, SQLite transactions begin without the lock (for reading only)."""
    url = database_url(url_or_path)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"--db: {url_or_path!r} is not a database URL or a path") from exc
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"--db: {parsed.get_backend_name()!r} is not supported (sqlite or postgresql)"
        )
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # transactions begun below, not by the driver
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # Take the write lock when a transaction begins: a transaction that read first
            # and writes later fails at once (SQLITE_BUSY, no waiting) if another wrote
            # meanwhile; taken up front, writers wait their turn (busy_timeout).
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    return create_engine(url, pool_pre_ping=True)


def _alembic_config(engine: Engine) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the store's schema to ``revision`` (the newest by default)."""
    from alembic import command

    command.upgrade(_alembic_config(engine), revision)


class Store:
    """A store: its engine and a session factory. ``with store.session() as s:`` is one
    transaction (committed on leaving, rolled back on an error)."""

    def __init__(self, url_or_path: str, *, migrate: bool = True) -> None:
        self.engine = make_engine(url_or_path)
        if migrate:
            upgrade(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._reader: Engine | None = None
        readers = self._sessions
        if self.engine.dialect.name == "sqlite":
            # Readers need no write lock; on SQLite they get an engine of their own.
            self._reader = make_engine(url_or_path, immediate=False)
            readers = sessionmaker(self._reader, expire_on_commit=False)
        self._readers = readers

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s, s.begin():
            yield s

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A transaction that only reads (on SQLite it does not wait for the writers)."""
        with self._readers() as s, s.begin():
            yield s

    def close(self) -> None:
        self.engine.dispose()
        if self._reader is not None:
            self._reader.dispose()
