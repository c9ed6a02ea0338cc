"""The master's packet sizes, its answer to Shrink, and a worker's wait for a peer's fetch:
the parts of the runtime that need no cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from datasched.core.actions import Shrink
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Subjob
from datasched.runtime.engine import EngineConfig, RuntimeEngine
from datasched.runtime.storage import Throttle
from datasched.runtime.worker import PacketSpec, _await_peer


def engine(config: EngineConfig) -> RuntimeEngine:
    # The engine only talks to its client when it runs; these tests call it directly.
    return RuntimeEngine(
        None,  # type: ignore[arg-type]
        ["a", "b"],
        policy="out-of-order",
        cache_bytes=10**9,
        cost=CostModel(),
        config=config,
    )


def job(events: int, done: int = 0) -> Any:
    return SimpleNamespace(
        job_id=0, data=IntervalSet.range(0, events), done=IntervalSet.range(0, done)
    )


def running(eng: RuntimeEngine, node: int, data: IntervalSet, pace_s: float) -> None:
    n = eng.nodes[node]
    n.subjob = Subjob(subjob_id=node, job_id=0, data=data)
    n.todo = data
    n.s_per_event = pace_s


CONFIG = EngineConfig(packet_target_s=1.0, min_packet_events=50, max_packet_events=10_000)


def test_a_packet_holds_about_the_target_time_of_work() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    # 1 s at 1 ms per event; the job has far more than 4 s left.
    assert eng._packet_events(eng.nodes[0], job(100_000), 0, 50_000) == 1000


def test_a_packet_takes_the_rest_of_its_file_rather_than_leave_a_sliver() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    # 1,000 events would leave 400 of the file: less than half a packet, so all 1,400 go.
    assert eng._packet_events(eng.nodes[0], job(100_000), 0, 1400) == 1400
    assert eng._packet_events(eng.nodes[0], job(100_000), 0, 1600) == 1000


def test_packets_shrink_as_the_job_nears_its_end() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 1000), 0.001)
    running(eng, 1, IntervalSet.range(1000, 2000), 0.001)
    # 1,200 events left on two nodes: 0.6 s each, a quarter of it is 0.15 s: 150 events.
    assert eng._packet_events(eng.nodes[0], job(2000, done=800), 800, 100_000) == 150
    # Never below the minimum.
    assert eng._packet_events(eng.nodes[0], job(2000, done=1990), 1990, 100_000) == 50


def test_shrink_releases_only_what_is_not_sent_yet() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 1000), 0.001)
    eng.nodes[0].todo = IntervalSet.range(400, 1000)  # [0, 400) is in flight or done
    answer = eng._shrink(Shrink(subjob_id=0, node=0, release=IntervalSet.range(300, 700)))
    assert answer.released == IntervalSet.range(400, 700)
    assert eng.nodes[0].todo == IntervalSet.range(700, 1000)
    subjob = eng.nodes[0].subjob
    assert subjob is not None and subjob.data == IntervalSet([(0, 400), (700, 1000)])


def test_shrink_of_a_subjob_no_longer_running_releases_nothing() -> None:
    eng = engine(CONFIG)
    answer = eng._shrink(Shrink(subjob_id=5, node=1, release=IntervalSet.range(0, 10)))
    assert not answer.released and answer.subjob_id == 5 and answer.node == 1


def packet(n_bytes: int) -> PacketSpec:
    return PacketSpec(0, 0, "file:///x.root", "Events", 0, 10, n_bytes, "m:p", ".")


def finish_later(part: Path, final: Path | None, after_s: float) -> threading.Thread:
    def work() -> None:
        time.sleep(after_s)
        if final is not None:
            final.write_bytes(b"x")
        part.unlink()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_a_peer_copy_that_is_there_is_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "f.root"
    path.write_bytes(b"x")
    assert _await_peer(path, Throttle(1.0), packet(10**9))


def test_a_reader_waits_for_the_peers_fetch_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "f.root"
    part = path.with_suffix(".part")
    part.write_bytes(b"")
    thread = finish_later(part, path, 0.2)
    t0 = time.monotonic()
    # Our own fetch of 1 MB at 1 MB/s would take 1 s: waiting 0.2 s for the peer is better.
    assert _await_peer(path, Throttle(1e6), packet(10**6))
    assert 0.1 < time.monotonic() - t0 < 0.9
    thread.join()


def test_a_failed_peer_fetch_sends_the_reader_to_tertiary_storage(tmp_path: Path) -> None:
    path = tmp_path / "f.root"
    part = path.with_suffix(".part")
    part.write_bytes(b"")
    thread = finish_later(part, None, 0.1)
    assert not _await_peer(path, Throttle(1e6), packet(10**6))
    thread.join()


def test_the_wait_is_bounded_by_the_time_of_a_fetch_of_our_own(tmp_path: Path) -> None:
    path = tmp_path / "f.root"
    path.with_suffix(".part").write_bytes(b"")  # a peer that never finishes
    t0 = time.monotonic()
    assert not _await_peer(path, Throttle(1e6), packet(200_000))  # 0.2 s of our own
    assert 0.15 < time.monotonic() - t0 < 1.0


def test_no_peer_fetch_means_no_wait(tmp_path: Path) -> None:
    t0 = time.monotonic()
    assert not _await_peer(tmp_path / "f.root", Throttle(1e6), packet(10**9))
    assert time.monotonic() - t0 < 0.1
