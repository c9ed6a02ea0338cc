"""A store URL's password is never shown: not by the command line's errors (a server that
cannot be reached, a URL that does not parse), not in ``serve``'s banner, not in a Store's
errors or its repr; the masking holds for passwords an attacker of the logs would hope to
see slip through (with ``@``, ``/``, encoded characters, in a query parameter)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.service.store.db import Store, StoreError, StoreUnavailable, masked_url, scrub

SECRET = "Sup3r-s3cret"
SRC = Path(__file__).parents[2] / "src"
TESTS = Path(__file__).parents[1]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://ann:{SECRET}@db.example/svc", "postgresql://ann:***@db.example/svc"),
        (f"postgresql://ann:{SECRET}@x@db:5432/svc", "postgresql://ann:***@db:5432/svc"),
        (f"postgresql://ann:a/{SECRET}@db/svc", "postgresql://ann:***@db/svc"),
        (f"postgresql://ann:{SECRET}%40x@db/svc", "postgresql://ann:***@db/svc"),
        (f"postgresql://ann:{SECRET}@db:port/svc", "postgresql://ann:***@db:port/svc"),
        (
            f"postgresql://db/svc?user=ann&password={SECRET}",
            "postgresql://db/svc?user=ann&password=***",
        ),
        ("postgresql://ann@db/svc", "postgresql://ann@db/svc"),
        ("/var/lib/datasched/store.db", "/var/lib/datasched/store.db"),
        ("sqlite:///store.db", "sqlite:///store.db"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    assert masked_url(url) == shown
    assert SECRET not in masked_url(url)


def test_scrub_removes_the_password_wherever_a_message_quotes_it() -> None:
    url = f"postgresql://ann:{SECRET}%21@db/svc"
    message = (
        f"connection to {url} failed: bad password {SECRET}! "
        f"(also tried postgres://bob:other-pw@db2/x)"
    )
    clean = scrub(message, url)
    assert SECRET not in clean
    assert "other-pw" not in clean
    assert "postgresql://ann:***@db/svc" in clean
    assert "postgres://bob:***@db2/x" in clean


def test_store_errors_mask_the_password() -> None:
    with pytest.raises(StoreError) as bad:
        Store(f"postgresql://ann:{SECRET}@db:notaport/svc")
    assert SECRET not in str(bad.value)
    assert "***" in str(bad.value)
    with pytest.raises(StoreUnavailable) as unreachable:
        Store(f"postgresql://ann:{SECRET}@127.0.0.1:1/svc")
    text = str(unreachable.value)
    assert SECRET not in text
    assert "postgresql://ann:***@127.0.0.1:1/svc" in text
    assert unreachable.value.__cause__ is None
    assert unreachable.value.__suppress_context__


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://ann:{SECRET}@127.0.0.1:1/svc",  # refused at once
        f"postgresql://ann:{SECRET}@127.0.0.1:not-a-port/svc",  # does not parse
        f"postgresql://ann:{SECRET}@x@127.0.0.1:1/svc",  # an unencoded @ in the password
        f"postgresql+nosuchdriver://ann:{SECRET}@127.0.0.1:1/svc",  # no such driver
    ],
)
@pytest.mark.parametrize("command", [["users", "list"], ["serve", "--no-sandbox"]])
def test_the_command_line_never_prints_the_password(url: str, command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--db", url])
    assert result.exit_code != 0
    assert SECRET not in result.output, result.stderr
    assert SECRET not in result.stderr, result.stderr
    assert "error: --db" in result.stderr
    env = CliRunner().invoke(app, command, env={"DATASCHED_DB": url})
    assert env.exit_code != 0
    assert SECRET not in env.stderr + env.output


def test_the_serve_banner_masks_the_password(
    postgres_server: str, pg_database: str, tmp_path: Path
) -> None:
    # The test server trusts loopback: any password is accepted, and must not be shown.
    url = pg_database.replace("postgres@", f"postgres:{SECRET}@", 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "datasched", "serve", "--db", url, "--port", "0",
             "--runner", "svc_support:make_fake_runner", "--language",
             "svc_support:FakeLanguage", "--no-sandbox"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "the API at" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no banner"
            time.sleep(0.1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a loaded machine: what it printed is what counts
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert SECRET not in text
    assert f"postgres:***@{postgres_server.split('@', 1)[1]}" in text
