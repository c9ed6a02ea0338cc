"""``datasched result`` against a daemon on loopback: it writes the bytes the server serves
to DIR/result.pkl, loads them with datasched.safepickle and prints what they hold; a result
holding a class off the list (here another user's, fetched by an administrator) stays written
but is not loaded, and its code never runs; a server that does not merge has its packets
merged here through the same loader."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hist
import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.service.app import build_state
from datasched.service.catalog import Catalog
from datasched.service.contracts import FileRef, PacketDone
from datasched.service.daemon import StoreListener
from datasched.service.store.db import Store
from datasched.service.store.models import Request
from datasched.service.users import add_user
from svc_support import FakeLanguage, FakeRunner, serving_on_loopback

cli = CliRunner()


class RunsShell:
    """Unpickling it runs a shell command writing ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"echo ran > {self.marker}",))


class Mine:
    """A class of the user's own: loads with --trust only."""

    def __init__(self, n: int) -> None:
        self.n = n


@dataclass
class Served:
    url: str
    tokens: dict[str, str]
    store: Store
    request_id: str

    def set_result(self, result: bytes | None, error: str | None = None) -> None:
        with self.store.session() as s:
            req = s.get(Request, self.request_id)
            assert req is not None
            req.result, req.result_error = result, error

    def result(self, out: Path, *more: str, user: str = "root") -> Any:
        args = ["result", self.request_id, "--out", str(out), *more]
        return cli.invoke(app, [*args, "--server", self.url, "--token", self.tokens[user]])


@pytest.fixture
def served(sqlite_store: Store, tmp_path: Path) -> Iterator[Served]:
    """A daemon on loopback whose user ann has a completed request, merged by the stand-in
    runner to ``{"events": 40}``; root is an administrator."""
    with sqlite_store.session() as s:
        tokens = {"ann": add_user(s, "ann", "g"), "root": add_user(s, "root", "a", admin=True)}
    Catalog(sqlite_store).put("d", [FileRef(f"/d/{i}.root", 20, 200) for i in range(2)], {})
    runner = FakeRunner(packet=5)
    state = build_state(sqlite_store, FakeLanguage(), runner=runner, period_s=0.05)
    with serving_on_loopback(state) as url:
        req = tmp_path / "request.yaml"
        req.write_text("processor: p.py:P\ninput: [/d/0.root, /d/1.root]\nfiles_per_job: 2\n")
        r = cli.invoke(app, ["submit", str(req), "--server", url, "--token", tokens["ann"]])
        req.unlink()
        assert r.exit_code == 0, r.output
        rid = r.stdout.strip()
        deadline = time.monotonic() + 30
        while True:  # completed, and merged by the daemon's merger
            with sqlite_store.reading() as s:
                got = s.get(Request, rid)
                assert got is not None
                if got.result is not None:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield Served(url, tokens, sqlite_store, rid)
    runner.wait()


def test_a_result_is_written_as_served_and_summarised(served: Served, tmp_path: Path) -> None:
    h = hist.Hist.new.Reg(60, 60, 120, name="mass").Double()
    h.fill([91.0, 89.0])
    blob = pickle.dumps({"mass": h, "n_events": 4000, "tags": ["a", "b"]})
    served.set_result(blob)
    r = served.result(tmp_path / "out", user="ann")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == str(tmp_path / "out" / "result.pkl")
    assert lines[1:] == [
        "mass: hist.Hist (1 axis, 60 bins)",
        "n_events: int 4000",
        "tags: list (2 items)",
    ]
    assert (tmp_path / "out" / "result.pkl").read_bytes() == blob
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["result.pkl"]


def test_a_hostile_result_fetched_by_an_administrator_is_written_not_run(
    served: Served, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    blob = pickle.dumps({"n": 1, "trap": RunsShell(marker)})
    served.set_result(blob)
    r = served.result(tmp_path / "out")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr  # one line
    assert "posix.system" in r.stderr
    assert "--trust" in r.stderr
    assert "not loaded" in r.stderr
    assert not marker.exists(), "datasched result ran the result's code"
    assert (tmp_path / "out" / "result.pkl").read_bytes() == blob  # kept, to inspect
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["result.pkl"]


def test_trust_loads_ones_own_classes(served: Served, tmp_path: Path) -> None:
    served.set_result(pickle.dumps({"mine": Mine(3)}))
    r = served.result(tmp_path / "a", user="ann")
    assert r.exit_code == 1
    assert f"{Mine.__module__}.Mine" in r.stderr
    r = served.result(tmp_path / "b", "--trust", user="ann")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1] == f"mine: {Mine.__module__.split('.')[0]}.Mine"


def test_a_result_that_does_not_unpickle_is_one_line(served: Served, tmp_path: Path) -> None:
    served.set_result(b"\x80\x05not a pickle")
    r = served.result(tmp_path / "out")
    assert r.exit_code == 1
    assert "written, but it does not load" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_packets_are_merged_here_when_the_server_does_not_merge(
    served: Served, tmp_path: Path
) -> None:
    served.set_result(None, "the results could not be merged: boom")
    r = served.result(tmp_path / "out", user="ann")
    assert r.exit_code == 0, r.output
    assert pickle.loads((tmp_path / "out" / "result.pkl").read_bytes()) == {"events": 40}
    assert r.stdout.splitlines()[1:] == ["events: int 40"]
    # A packet holding a class off the list: nothing is merged nor written, nothing runs.
    marker = tmp_path / "ran"
    packet = PacketDone(
        f"{served.request_id}.0",
        "/d/0.root",
        100,
        101,
        "n",
        1,
        0.0,
        pickle.dumps(RunsShell(marker)),
    )
    StoreListener(served.store).packet_done(packet)
    r = served.result(tmp_path / "again")
    assert r.exit_code == 1
    assert "posix.system" in r.stderr
    assert "nothing written" in r.stderr
    assert not marker.exists()
    assert not (tmp_path / "again" / "result.pkl").exists()
