"""``datasched serve`` killed with SIGKILL mid-request and started again on the same store:
the request completes and every event is counted exactly once. (The daemon runs the
stand-in language and runner of tests/svc_support.py, through its hidden --language and
--runner options.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from datasched.service.catalog import Catalog
from datasched.service.contracts import FileRef
from datasched.service.store.db import Store
from datasched.service.store.models import Packet
from datasched.service.users import add_user

SRC = Path(__file__).parents[2] / "src"
TESTS = Path(__file__).parents[1]
EVENTS = (60, 45, 30)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(db: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
        "DATASCHED_FAKE_DELAY_S": "0.2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "datasched", "serve", "--db", db, "--port", str(port),
         "--runner", "svc_support:make_fake_runner", "--language", "svc_support:FakeLanguage",
         "--no-sandbox"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _get(url: str, token: str) -> Any:
    return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


def _wait_up(base: str, token: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the daemon exited"
        try:
            _get(f"{base}/requests", token)
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.2)


@pytest.mark.slow
def test_serve_killed_mid_request_resumes_and_counts_every_event_once(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = Store(db)
    with store.session() as s:
        token = add_user(s, "ann", "g")
    Catalog(store).put("d", [FileRef(f"/d/{i}.root", n, 10 * n) for i, n in enumerate(EVENTS)])
    store.close()
    port = _port()
    base = f"http://127.0.0.1:{port}/api/v1"
    proc = _serve(db, port)
    try:
        _wait_up(base, token, proc)
        r = httpx.post(
            f"{base}/requests",
            content="processor: p\ninput: [{catalog: dataset=d}]\n",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
        )
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        deadline = time.monotonic() + 30
        while _get(f"{base}/requests/{rid}", token)["progress"]["events"] < 40:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = Store(db)
    with store.session() as s:
        before = len(s.execute(select(Packet.id)).all())
    store.close()
    n_packets = sum(-(-n // 5) for n in EVENTS)
    assert 0 < before < n_packets  # killed mid-request
    got = _get  # the same calls against the restarted daemon
    proc = _serve(db, port)
    try:
        _wait_up(base, token, proc)
        deadline = time.monotonic() + 60
        while (req := got(f"{base}/requests/{rid}", token))["state"] != "completed":
            assert time.monotonic() < deadline, req
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert req["progress"]["events"] == sum(EVENTS)
    store = Store(db)
    with store.session() as s:
        rows = s.execute(select(Packet.job_id, Packet.url, Packet.start, Packet.stop)).all()
    store.close()
    assert len(rows) == len(set(rows)) == n_packets
    assert sum(b - a for _, _, a, b in rows) == sum(EVENTS)
