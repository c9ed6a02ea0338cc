"""Where the store lives: an SQLAlchemy engine for a database URL (SQLite by default, in WAL
mode; PostgreSQL through psycopg 3), sessions, and the schema brought to Alembic's head.

The migrations ship inside the package (``migrations/``), so ``datasched serve`` upgrades
any store it opens to the schema of the code that runs it.

A store's URL may hold a password (``postgresql://user:secret@host/db``): whatever prints
or logs one shows :func:`masked_url` of it, and an error's text goes through
:func:`scrub` first (a driver's message may quote what it was given).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "MIGRATIONS",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreUnavailable",
    "database_url",
    "make_engine",
    "masked_url",
    "scrub",
    "upgrade",
]

MASK = "***"
"""What a password is shown as."""
_QUERY_SECRET = re.compile(r"(?i)([?&](?:password|passwd|pwd|pass)=)([^&#\s]*)")
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s:@/]*):[^\s@]*@")

MIGRATIONS = Path(__file__).with_name("migrations")
"""The Alembic scripts of the store (package data)."""


class StoreError(ValueError):
    """A database URL that cannot be used, or a store that cannot be opened; the message
    says why (with the URL's password masked)."""


class StoreUnavailable(StoreError):
    """A store whose URL is right but that cannot be reached or upgraded."""


class StoreBusy(StoreError):
    """A store another daemon serves (:meth:`Store.claim`)."""


DAEMON_LOCK_KEY = 0x6461746173636864
"""PostgreSQL's advisory lock a daemon holds on its store ("datasched" in ASCII, cut)."""


def _split_secret(url_or_path: str) -> tuple[str, str, str] | None:
    """``(before, password, after)`` of a URL's user information, read as loosely as any
    parser might: the password runs from the first ``:`` after the user name to the *last*
    ``@`` (a password with an ``@`` left unencoded is still all masked); None without one."""
    scheme, sep, rest = url_or_path.partition("://")
    at = rest.rfind("@")
    if not sep or at < 0:
        return None
    user, colon, password = rest[:at].partition(":")
    if not colon:
        return None
    return f"{scheme}://{user}:", password, rest[at:]


def masked_url(url_or_path: str) -> str:
    """``url_or_path`` as it may be shown: a URL's password (in its user information or a
    ``password=`` parameter) replaced by ``***``, whether or not the URL parses. A path is
    shown as it is."""
    split = _split_secret(url_or_path)
    shown = url_or_path if split is None else f"{split[0]}{MASK}{split[2]}"
    return _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, shown)


def _secrets(url_or_path: str) -> set[str]:
    """Every form the URL's password may take in a message: as written, decoded, and as
    SQLAlchemy reads it."""
    found: set[str] = set()
    split = _split_secret(url_or_path)
    if split is not None:
        found |= {split[1], unquote(split[1])}
    found |= {m.group(2) for m in _QUERY_SECRET.finditer(url_or_path)}
    found |= {unquote(m.group(2)) for m in _QUERY_SECRET.finditer(url_or_path)}
    try:
        parsed = make_url(database_url(url_or_path))
    except Exception:  # a URL that does not parse has no parsed password
        parsed = None
    if parsed is not None and parsed.password:
        found.add(str(parsed.password))
    return {x for x in found if x}


def scrub(text: str, url_or_path: str = "") -> str:
    """``text`` (an error's message) safe to show: ``url_or_path`` in it masked, its
    password wherever else it appears replaced by ``***``, and any other URL's password
    masked too."""
    if url_or_path:
        text = text.replace(url_or_path, masked_url(url_or_path))
        for secret in sorted(_secrets(url_or_path), key=len, reverse=True):
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)


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
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        shown = masked_url(url_or_path)
        raise StoreError(f"--db: {shown!r} is not a database URL or a path") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"--db: {parsed.get_backend_name()!r} is not supported (sqlite or postgresql)"
        )
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            # Users' requests and results are in it: readable by its owner alone. SQLite
            # gives its journal files the database file's mode. Only a new file is opened
            # here: closing a descriptor of a database this process uses would drop the
            # locks SQLite holds on it (POSIX locks go with any close of the file).
            with contextlib.suppress(FileExistsError):
                os.close(os.open(parsed.database, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
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
        self.shown_url = masked_url(url_or_path)
        """The store's URL as it may be printed (its password masked)."""
        self.engine = make_engine(url_or_path)
        if migrate:
            try:
                upgrade(self.engine)
            except Exception as exc:
                # The driver's message may quote the URL or its password: the cause is not
                # chained (a traceback would print it), its text is scrubbed.
                self.engine.dispose()
                reason = scrub(f"{type(exc).__name__}: {exc}", url_or_path)
                raise StoreUnavailable(
                    f"--db: cannot open the store {self.shown_url}: {reason}"
                ) from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._reader: Engine | None = None
        self._claim: int | Connection | None = None
        """What holds the store for a daemon (:meth:`claim`): a lock file's descriptor, or a
        connection holding an advisory lock."""
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

    def __repr__(self) -> str:
        return f"Store({self.shown_url!r})"

    def claim(self) -> None:
        """Hold the store for this process's daemon until it closes the store or ends: one
        daemon a store. Two would each resume the other's running jobs and hand the same
        events out twice. :class:`StoreBusy` when another process holds it. On SQLite the
        lock is a file beside the database's (``DB.daemon-lock``, flock, which ends with
        the process); on PostgreSQL an advisory lock held by a connection of its own."""
        if self.engine.dialect.name == "sqlite":
            database = self.engine.url.database
            if not database or database == ":memory:":
                return
            lock = f"{database}.daemon-lock"
            fd = os.open(lock, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                who = f" (process {holder})" if holder.isdigit() else ""
                raise StoreBusy(
                    f"--db: another daemon serves the store {self.shown_url}{who}; one "
                    f"daemon a store (stop it first, or give another --db)"
                ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._claim = fd
            return
        from sqlalchemy import text

        conn = self.engine.connect()
        held = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": DAEMON_LOCK_KEY})
        if not held.scalar():
            conn.close()
            raise StoreBusy(
                f"--db: another daemon serves the store {self.shown_url}; one daemon a store "
                f"(stop it first, or give another --db)"
            )
        conn.commit()
        self._claim = conn

    def close(self) -> None:
        claim, self._claim = self._claim, None
        if isinstance(claim, int):
            os.close(claim)  # the flock goes with it
        elif claim is not None:
            claim.close()  # and the advisory lock with the session
        self.engine.dispose()
        if self._reader is not None:
            self._reader.dispose()
