"""The API's limits against a hostile user: bodies bounded while they are read (a 300 MB
chunked body against a real daemon, whose peak memory stays put), every other call's body
bounded, refused requests kept bounded (their bodies and errors cut, a quota per user, a
retention period), and a cap on each user's requests not yet final."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from typer.testing import CliRunner

from datasched.cli import app as cli
from datasched.service.api.bodies import BodyTooLarge, BoundedBodies
from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app, sweep_refused
from datasched.service.contracts import FieldError
from datasched.service.store import ops, refused
from datasched.service.store.db import Store
from datasched.service.store.models import Request
from datasched.service.users import add_user, list_users
from svc_support import FakeLanguage, seed

YAML = "application/yaml"
SRC = Path(__file__).parents[2] / "src"
TESTS = Path(__file__).parents[1]
GOOD = "processor: p\ninput: [/star/pp/0.root]\n"
BAD = "title: bad\ninput: [/star/pp/0.root]\n"  # no processor: refused


# -- a real daemon over loopback ---------------------------------------------------------------


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    base: str
    port: int
    tokens: dict[str, str]

    def h(self, who: str, **more: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}", **more}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def daemon(tmp_path: Path, *options: str) -> Iterator[Daemon]:
    """``datasched serve`` in a process of its own, with the stand-in language and runner
    of tests/svc_support.py, over a fresh store with users ann, bob and root."""
    db = str(tmp_path / "daemon.db")
    store = Store(db)
    tokens = seed(store)
    store.close()
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "datasched", "serve", "--db", db, "--port", str(port),
         "--runner", "svc_support:make_fake_runner", "--language", "svc_support:FakeLanguage",
         "--no-sandbox", *options],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    d = Daemon(proc, f"http://127.0.0.1:{port}/api/v1", port, tokens)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the daemon exited"
            try:
                httpx.get(f"{d.base}/requests", headers=d.h("ann"), timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the daemon did not start"
                time.sleep(0.2)
        yield d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def peak_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


class Endless:
    """A body of ``total`` bytes, made as it is sent (never held whole), counting what
    the client was able to send."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.sent = total, b"x" * chunk, 0

    def __iter__(self) -> Iterator[bytes]:
        while self.sent < self.total:
            self.sent += len(self.chunk)
            yield self.chunk


def _raw_post_headers(port: int, path: str, headers: dict[str, str]) -> bytes:
    """Send a request's head only (no body at all) and read the answer."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        data = b""
        while True:
            got = sock.recv(65536)
            if not got:
                return data
            data += got


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")
def test_a_300_mb_chunked_body_is_refused_unread_and_the_daemon_stays_small(
    tmp_path: Path,
) -> None:
    with daemon(tmp_path) as d:
        before = peak_mb(d.proc.pid)
        body = Endless(300_000_000)
        r = httpx.post(
            f"{d.base}/requests",
            content=iter(body),
            headers=d.h("ann", **{"Content-Type": YAML}),
            timeout=120,
        )
        assert r.status_code == 413, r.text
        assert r.json()["errors"][0]["field"] == "body"
        assert "1000000 bytes" in r.json()["errors"][0]["reason"]
        assert r.headers["connection"] == "close"
        assert body.sent < 100_000_000  # the daemon stopped reading long before the end
        # Every other call with a body is bounded as well (here by --max-json-kb).
        groups = Endless(300_000_000)
        r = httpx.put(
            f"{d.base}/groups/physics",
            content=iter(groups),
            headers=d.h("root", **{"Content-Type": "application/json"}),
            timeout=120,
        )
        assert r.status_code == 413
        assert r.json()["errors"][0]["field"] == "body"
        assert groups.sent < 100_000_000
        grown = peak_mb(d.proc.pid) - before
        assert grown < 100, f"the daemon's peak memory grew by {grown:.0f} MB"
        # A body declared too large is refused before a byte of it is sent.
        answer = _raw_post_headers(
            d.port,
            "/api/v1/requests",
            d.h("ann", **{"Content-Type": YAML, "Content-Length": "300000000"}),
        )
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
        assert b'"field":"body"' in answer
        # The daemon still serves, and nothing was stored.
        r = httpx.get(f"{d.base}/requests", headers=d.h("ann"), timeout=10)
        assert r.status_code == 200
        assert r.json()["requests"] == []
        r = httpx.post(
            f"{d.base}/requests", content=GOOD, headers=d.h("ann", **{"Content-Type": YAML})
        )
        assert r.status_code == 201, r.text


# -- bodies through the application ------------------------------------------------------------


@dataclass
class Api:
    client: TestClient
    tokens: dict[str, str]
    store: Store

    def h(self, who: str, **more: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}", **more}

    def submit(self, who: str, body: str) -> Any:
        return self.client.post(
            "/api/v1/requests", content=body, headers=self.h(who, **{"Content-Type": YAML})
        )

    def ids(self, who: str) -> list[str]:
        got = self.client.get("/api/v1/requests", headers=self.h(who)).json()["requests"]
        return [r["id"] for r in got]


@contextmanager
def api_with(store: Store, **limits: Any) -> Iterator[Api]:
    """The application over ``store`` with ``limits`` (no runner: requests stay pending)."""
    tokens = seed(store)
    state = build_state(store, FakeLanguage(), limits=Limits(rate_per_s=1e6, burst=10**6, **limits))
    with TestClient(create_app(state)) as client:
        yield Api(client, tokens, store)


def test_every_other_body_is_bounded_and_an_unread_body_closes_the_connection(
    sqlite_store: Store,
) -> None:
    with api_with(sqlite_store, max_json_bytes=1000) as api:
        url = "/api/v1/groups/physics"
        json = {"Content-Type": "application/json"}
        big = '{"priority": 2, "quota": 3' + " " * 2000 + "}"
        r = api.client.put(url, content=big, headers=api.h("root", **json))
        assert r.status_code == 413
        assert r.json()["errors"][0]["field"] == "body"
        assert r.headers["connection"] == "close"
        chunks = iter([big[:600].encode(), big[600:].encode()])
        r = api.client.put(url, content=chunks, headers=api.h("root", **json))
        assert r.status_code == 413  # chunked: no Content-Length to go by
        groups = api.client.get("/api/v1/groups", headers=api.h("ann")).json()["groups"]
        assert {g["name"]: g["priority"] for g in groups}["physics"] == 1.0  # unchanged
        r = api.client.put(url, json={"priority": 2}, headers=api.h("root"))
        assert r.status_code == 200
        assert r.json()["priority"] == 2
        # No token: refused before the body is read, and the connection is not kept for it.
        r = api.client.post("/api/v1/requests", content=GOOD, headers={"Content-Type": YAML})
        assert r.status_code == 401
        assert r.headers["connection"] == "close"
        assert r.headers["www-authenticate"] == "Bearer"
        r = api.client.get("/api/v1/requests", headers=api.h("ann"))
        assert r.status_code == 200
        assert "close" not in r.headers.get("connection", "")


async def _drive(middleware: BoundedBodies, headers: list[tuple[bytes, bytes]]) -> Any:
    asked = {"receive": 0, "app": 0}
    sent: list[dict[str, Any]] = []

    async def endless() -> dict[str, Any]:
        asked["receive"] += 1
        return {"type": "http.request", "body": b"y" * 1000, "more_body": True}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        asked["app"] += 1
        while (await receive()).get("more_body"):
            pass

    middleware.app = app
    scope = {"type": "http", "method": "POST", "path": "/x", "headers": headers}
    try:
        await middleware(scope, endless, send)
    except BodyTooLarge as exc:
        return asked, sent, exc
    return asked, sent, None


def test_the_middleware_stops_an_endless_body_at_its_limit() -> None:
    import asyncio

    bounded = BoundedBodies(lambda *_: None, limit_for=lambda method, path: 10_000)  # type: ignore[arg-type]
    asked, sent, exc = asyncio.run(_drive(bounded, [(b"transfer-encoding", b"chunked")]))
    assert isinstance(exc, BodyTooLarge)
    assert exc.status_code == 413
    assert asked["receive"] == 11  # 11 chunks of 1000 bytes: the one past 10,000 ends it
    asked, sent, exc = asyncio.run(_drive(bounded, [(b"content-length", b"10001")]))
    assert exc is None
    assert asked == {"receive": 0, "app": 0}  # answered without reading
    assert sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]


# -- refused requests, kept bounded ------------------------------------------------------------


def test_clip_body_cuts_on_a_character_and_says_how_much() -> None:
    assert refused.clip_body("short", 10) == "short"
    clipped = refused.clip_body("aé" * 10, 5)  # "aé" is 3 bytes: the 5th byte is inside an é
    assert clipped.startswith("aéa\n")
    assert "26 more bytes" in clipped


def test_a_refused_requests_body_and_errors_are_kept_cut(sqlite_store: Store) -> None:
    with api_with(sqlite_store, refused_body_bytes=1000, max_request_bytes=2_000_000) as api:
        body = BAD + "# " + "z" * 50_000 + "\n"
        r = api.submit("ann", body)
        assert r.status_code == 422
        assert r.json()["state"] == "refused"
        with sqlite_store.reading() as s:
            raw = s.get(Request, r.json()["id"]).raw  # type: ignore[union-attr]
        assert raw.startswith(body[:1000])
        assert f"{len(body) - 1000} more bytes" in raw
        assert len(raw) < 1100
        # A request made of 500 mistakes, each quoting a long input: 100 errors answered
        # and kept, then one saying how many more, each reason cut.
        many = "processor: p\ninput: [" + ", ".join(["/" + "q" * 3000] * 500) + "]\n"
        r = api.submit("ann", many)
        assert r.status_code == 422
        errors = r.json()["errors"]
        assert len(errors) == 101
        assert errors[-1] == {
            "field": "errors",
            "reason": "400 more errors not shown",
        }
        assert all(len(e["reason"]) < 1100 for e in errors)
        assert errors[0]["reason"].endswith("more characters)")
        got = api.client.get(f"/api/v1/requests/{r.json()['id']}", headers=api.h("ann")).json()
        assert got["errors"] == errors


def test_each_user_keeps_only_their_newest_refused_requests(sqlite_store: Store) -> None:
    with api_with(sqlite_store, refused_keep=3) as api:
        kept = api.submit("ann", GOOD).json()["id"]
        bobs = api.submit("bob", BAD).json()["id"]
        refused = [api.submit("ann", BAD).json()["id"] for _ in range(5)]
        mine = api.ids("ann")
        assert set(mine) == {kept, *refused[2:]}  # the two oldest refused are gone
        for rid in refused[:2]:
            r = api.client.get(f"/api/v1/requests/{rid}", headers=api.h("ann"))
            assert r.status_code == 404
        assert api.ids("bob") == [bobs]  # another user's quota is their own


@pytest.fixture
def two_users(store: Store) -> tuple[Store, dict[str, Any]]:
    with store.session() as s:
        add_user(s, "ann", "g")
        add_user(s, "bob", "g")
    with store.session() as s:
        users = {u.name: u for u in list_users(s)}
    return store, users


def _age(store: Store, request_id: str, days: float) -> None:
    with store.session() as s:
        req = s.get(Request, request_id)
        assert req is not None
        req.created = datetime.now(UTC) - timedelta(days=days)


def test_refused_requests_are_pruned_and_swept_on_both_backends(
    two_users: tuple[Store, dict[str, Any]],
) -> None:
    store, users = two_users
    ann, bob = users["ann"], users["bob"]
    errors = [FieldError("x", "bad")]
    with store.session() as s:
        ids = [refused.store_refused(s, ann, "r", "yaml", errors).id for _ in range(4)]
        bobs = refused.store_refused(s, bob, "r", "yaml", errors).id
    for age, rid in zip((4, 3, 2, 1), ids, strict=True):
        _age(store, rid, age)
    with store.session() as s:  # a fifth: the quota of 2 keeps it and the newest other
        fifth = refused.store_refused(s, ann, "r", "yaml", errors, keep=2, body_bytes=1).id
    with store.reading() as s:
        left = set(s.scalars(select(Request.id).where(Request.owner_id == ann.id)))
        assert left == {fifth, ids[3]}
        assert s.get(Request, fifth).raw.startswith("r")  # type: ignore[union-attr]
    # The sweep deletes refused requests older than its cutoff, and nothing else.
    _age(store, ids[3], 10)
    _age(store, bobs, 10)
    with store.session() as s:
        open_id = ops.new_request_id()
        s.add(Request(id=open_id, owner_id=bob.id, state="pending", raw="", content_type="y"))
    _age(store, open_id, 30)
    with store.session() as s:
        assert refused.sweep_refused(s, datetime.now(UTC) - timedelta(days=7)) == 2
    with store.reading() as s:
        assert set(s.scalars(select(Request.id))) == {fifth, open_id}
        assert ops.open_requests(s, bob.id) == 1
        assert ops.open_requests(s, ann.id) == 0


def test_the_daemon_sweeps_old_refused_requests_when_it_starts(sqlite_store: Store) -> None:
    tokens = seed(sqlite_store)
    with sqlite_store.session() as s:
        ann = next(u for u in list_users(s) if u.name == "ann")
        old = refused.store_refused(s, ann, "r", "yaml", [FieldError("x", "bad")]).id
        new = refused.store_refused(s, ann, "r", "yaml", [FieldError("x", "bad")]).id
    _age(sqlite_store, old, 8)
    _age(sqlite_store, new, 6)
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(refused_days=7))
    assert state.limits.refused_days == 7
    with TestClient(create_app(state)) as client:
        deadline = time.monotonic() + 10
        h = {"Authorization": f"Bearer {tokens['ann']}"}
        while client.get(f"/api/v1/requests/{old}", headers=h).status_code != 404:
            assert time.monotonic() < deadline, "the old refused request was not swept"
            time.sleep(0.05)
        assert client.get(f"/api/v1/requests/{new}", headers=h).status_code == 200
    assert sweep_refused(state) == 0


# -- pending requests, capped per user ---------------------------------------------------------


def _stored(store: Store) -> int:
    with store.reading() as s:
        return int(s.scalar(select(func.count()).select_from(Request)) or 0)


def test_past_max_pending_a_submission_is_429_and_not_stored(sqlite_store: Store) -> None:
    with api_with(sqlite_store, max_pending=2) as api:
        first, second = (api.submit("ann", GOOD) for _ in range(2))
        assert first.status_code == second.status_code == 201
        for body in (GOOD, BAD):  # valid or not: refused, nothing kept
            r = api.submit("ann", body)
            assert r.status_code == 429, r.text
            (error,) = r.json()["errors"]
            assert error["field"] == "pending"
            assert "the limit is 2" in error["reason"]
            assert int(r.headers["Retry-After"]) >= 1
        assert _stored(sqlite_store) == 2
        assert api.submit("bob", GOOD).status_code == 201  # another user's cap is their own
        rid = first.json()["id"]
        assert api.client.delete(f"/api/v1/requests/{rid}", headers=api.h("ann")).status_code == 200
        assert api.submit("ann", GOOD).status_code == 201  # a final request frees a place


def test_concurrent_submissions_never_pass_the_cap(store: Store) -> None:
    with api_with(store, max_pending=3) as api:
        codes: list[int] = []
        start = threading.Barrier(8)

        def one() -> None:
            start.wait()
            codes.append(api.submit("ann", GOOD).status_code)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(codes) == [201] * 3 + [429] * 5
        with store.reading() as s:
            ann = next(u for u in list_users(s) if u.name == "ann")
            assert ops.open_requests(s, ann.id) == 3
        assert _stored(store) == 3


def test_serve_offers_every_limit() -> None:
    result = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for option in (
        "--max-request-kb",
        "--max-json-kb",
        "--max-pending",
        "--refused-keep",
        "--refused-days",
        "--refused-body-kb",
        "--rate",
        "--burst",
    ):
        assert option in result.output, option
