"""Fixtures of the service's tests: stores on SQLite and on a throwaway PostgreSQL.

The PostgreSQL server is Debian's (``/usr/lib/postgresql/*/bin``), started once per test
session on loopback (a free port; its unix socket in its own temporary directory) and
stopped at the end; each test gets a database of its own. Without the binaries the
PostgreSQL tests skip, unless ``DATASCHED_REQUIRE_POSTGRES=1`` (CI), which makes them fail.
PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user (made
by Debian's package) through ``runuser``.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from datasched.service.store.db import Store

_counter = itertools.count()


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _unavailable(reason: str) -> None:
    if os.environ.get("DATASCHED_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required (DATASCHED_REQUIRE_POSTGRES=1): {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on loopback for this session; its base URL (no database)."""
    bindir = _pg_bin()
    if bindir is None:
        _unavailable("PostgreSQL's initdb is not installed (Debian: postgresql)")
    assert bindir is not None
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no 'postgres' user to run the server")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="datasched-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if owner is not None:
        for p in (root, sock):
            os.chown(p, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    try:
        subprocess.run(
            [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off"
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
             "-l", str(root / "log"), "start"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"PostgreSQL did not start: {exc.stderr or exc.stdout}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def new_pg_database(server: str, template: str | None = None) -> str:
    """A fresh database on the server (a copy of ``template``, or empty); its URL."""
    import psycopg

    name = f"t{os.getpid()}_{next(_counter)}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    return f"{server}/{name}"


@pytest.fixture
def pg_database(postgres_server: str) -> str:
    """A fresh, empty database on the test server; its URL."""
    return new_pg_database(postgres_server)


@pytest.fixture(scope="session")
def postgres_template(postgres_server: str) -> str:
    """A database at the newest schema, copied for each test (faster than migrating)."""
    url = new_pg_database(postgres_server)
    Store(url).close()
    return url.rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store at the newest schema, copied for each test."""
    path = tmp_path_factory.mktemp("template") / "store.db"
    Store(str(path)).close()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return new_pg_database(request.getfixturevalue("postgres_server"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database at the newest schema and holding nothing, on each backend."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    server = request.getfixturevalue("postgres_server")
    return new_pg_database(server, request.getfixturevalue("postgres_template"))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store at its newest schema, on each backend."""
    s = Store(db_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path, sqlite_template: Path) -> Iterator[Store]:
    """A store on SQLite only (the API's and the daemon's tests)."""
    shutil.copy(sqlite_template, tmp_path / "store.db")
    s = Store(str(tmp_path / "store.db"))
    yield s
    s.close()
