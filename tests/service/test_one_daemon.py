"""One daemon a store. A second ``datasched serve`` on a store another daemon serves refuses
in one line before it touches anything (two would each resume the other's running jobs and
hand the same events out twice), and so does one whose port is taken: the store is opened only
once the port is ours. The store's file is its owner's alone."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from datasched.service.store.db import Store, StoreBusy
from datasched.service.users import add_user


def test_a_store_is_held_by_one_daemon_at_a_time(db_url: str) -> None:
    first, second = Store(db_url), Store(db_url)
    try:
        first.claim()
        with pytest.raises(StoreBusy, match="another daemon serves the store"):
            second.claim()
        first.close()  # its lock goes with it
        second.claim()
    finally:
        first.close()
        second.close()


def test_a_sqlite_store_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = Store(str(tmp_path / "s.db"))
        with store.session() as s:
            add_user(s, "ann", "g")  # the journal files exist now
        store.claim()
    finally:
        os.umask(old)
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


SRC = Path(__file__).parents[2] / "src"
TESTS = Path(__file__).parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(port: int, token: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"the daemon exited: {err}")
        try:
            httpx.get(
                f"http://127.0.0.1:{port}/api/v1/requests",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            ).raise_for_status()
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.2)


def _serve(db: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    return subprocess.Popen(
        [sys.executable, "-m", "datasched", "serve", "--db", str(db), "--port", str(port),
         "--runner", "svc_support:make_fake_runner", "--language", "svc_support:FakeLanguage",
         "--no-sandbox"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _serve_on_a_free_port(db: Path, token: str) -> tuple[subprocess.Popen[str], int]:
    """A daemon serving ``db``, up. A port found free can be taken before the daemon binds
    it (by another test run's daemon, or as a connection's source port): then another."""
    for _ in range(5):
        port = _port()
        daemon = _serve(db, port)
        try:
            _wait_up(port, token, daemon)
            return daemon, port
        except AssertionError as e:
            if daemon.poll() is None:
                daemon.kill()
                daemon.communicate()
            if "cannot listen on" not in str(e):
                raise
    raise AssertionError("no free port in five tries")


def _refused(proc: subprocess.Popen[str]) -> list[str]:
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    return [line for line in err.splitlines() if "WARNING: --no-sandbox" not in line]


def test_a_second_daemon_on_a_store_or_a_port_refuses_before_touching_anything(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = Store(str(db))
    with store.session() as s:
        token = add_user(s, "ann", "g")
    store.close()
    daemon, port = _serve_on_a_free_port(db, token)
    try:
        # The same store, another port.
        for _ in range(5):  # a port taken meanwhile is refused first: then another
            lines = _refused(_serve(db, _port()))
            if "cannot listen on" not in lines[0]:
                break
        assert len(lines) == 1, lines
        assert lines[0].startswith("error: --db: another daemon serves the store"), lines
        assert f"(process {daemon.pid})" in lines[0]
        # Another store, the same port: refused before that store is made.
        other = tmp_path / "other.db"
        lines = _refused(_serve(other, port))
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"error: --port: cannot listen on 127.0.0.1:{port}"), lines
        assert not other.exists()
        _wait_up(port, token, daemon)  # the first serves on
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=60)
    # Once it has stopped, the store is free for the next.
    again, _ = _serve_on_a_free_port(db, token)  # up: the store was free
    again.send_signal(signal.SIGTERM)
    again.communicate(timeout=60)
