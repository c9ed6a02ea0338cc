"""The master's packet sizes, its answer to Shrink, and a worker's wait for a peer's fetch:
the parts of the runtime that need no cluster."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from datasched.core.actions import Shrink
from datasched.core.data import DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob, Topology
from datasched.core.packets import PacketDepth, PacketSizing
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.peers import PEER_POLL_S, await_peer
from datasched.runtime.reports import EngineConfig
from datasched.runtime.storage import Throttle
from datasched.runtime.worker import peer_wait_s


def engine(config: EngineConfig, packets: PacketSizing | None = None) -> RuntimeEngine:
    # The engine only talks to its client when it runs; these tests call it directly.
    space = DataSpace()
    space.add_dataset("d", [FileSpec("f", 200_000, 10**9)])
    policy = build_policy("out-of-order")
    if packets is not None:
        policy.packet_sizing = packets
    sched = Scheduler(Topology.uniform(2, 10**9), space, policy)
    return RuntimeEngine(None, sched, ["a", "b"], config=config)  # type: ignore[arg-type]


def job(events: int, done: int = 0) -> Any:
    return SimpleNamespace(
        job_id=0, data=IntervalSet.range(0, events), done=IntervalSet.range(0, done)
    )


def running(eng: RuntimeEngine, node: int, data: IntervalSet, pace_s: float) -> None:
    n = eng.slots[node]
    n.subjob = Subjob(subjob_id=node, job_id=0, data=data)
    n.todo = data
    n.s_per_event = pace_s


CONFIG = EngineConfig(queue_s=1.0)
PACKETS = PacketSizing(target_s=1.0, min_events=50, max_events=10_000)


def size(eng: RuntimeEngine, jr: Any, a: int, file_stop: int, *, pulled: bool = False) -> int:
    """Events of the packet the policy cuts at ``a`` (the slot's work running to 10**6)."""
    return eng._packet_stop(eng.slots[0], jr, a, 10**6, file_stop, pulled=pulled) - a


def test_a_packet_holds_about_the_target_time_of_work() -> None:
    eng = engine(CONFIG, PACKETS)
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    # 1 s at 1 ms per event; the job has far more than 4 s left.
    assert size(eng, job(100_000), 0, 50_000) == 1000


def test_the_default_packetizer_is_the_policys_and_pulled_packets_are_whole() -> None:
    eng = engine(CONFIG)  # the policy's own default settings: 2 s of work
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    assert size(eng, job(100_000), 0, 50_000) == 2000
    # An Assign (a pull policy's packet) is cut only at its file's end.
    assert size(eng, job(100_000), 0, 50_000, pulled=True) == 50_000


def test_a_policy_cutting_outside_the_work_is_an_error() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    eng.scheduler.policy.packet_stop = lambda req: req.start  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="out-of-order: packet 0-0 outside 0-50000"):
        size(eng, job(100_000), 0, 50_000)


def test_short_packets_are_queued_deeper_on_their_worker() -> None:
    eng = engine(CONFIG)
    slot = eng.slots[0]
    assert eng._depth(slot) == CONFIG.packets_in_flight  # nothing measured yet
    slot.packet_s = 0.05  # 1 s of work aimed at, 50 ms packets: queue about a second
    assert eng._depth(slot) == CONFIG.max_in_flight  # ... but at most eight
    slot.packet_s = 0.3
    assert eng._depth(slot) == 4
    slot.packet_s = 2.0  # long packets: the minimum, the next one's file fetched meanwhile
    assert eng._depth(slot) == CONFIG.packets_in_flight


def test_the_simulators_depth_in_flight_is_the_runtimes() -> None:
    """The simulator cuts packets with the runtime's depth in flight (core/packets.py):
    one rule, and a bad setting refused by name."""
    config = EngineConfig(queue_s=0.5, max_in_flight=6)
    eng = engine(config)
    slot = eng.slots[0]
    for packet_s in (0.0, 0.01, 0.1, 0.2, 0.5, 3.0):
        slot.packet_s = packet_s
        assert config.packet_depth.depth(packet_s) == eng._depth(slot)
    with pytest.raises(ValueError, match="queue_s: must be positive"):
        PacketDepth(queue_s=0.0)
    with pytest.raises(ValueError, match="packets_in_flight: must be at least 1"):
        PacketDepth(packets_in_flight=9, max_in_flight=8)


def test_chunksize_caps_a_packet_pulled_or_not() -> None:
    eng = engine(CONFIG, PacketSizing(target_s=1.0, min_events=50, chunksize=300))
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    assert size(eng, job(100_000), 0, 50_000) == 300
    assert size(eng, job(100_000), 0, 50_000, pulled=True) == 300


def test_a_packet_takes_the_rest_of_its_file_rather_than_leave_a_sliver() -> None:
    eng = engine(CONFIG, PACKETS)
    running(eng, 0, IntervalSet.range(0, 100_000), 0.001)
    # 1,000 events would leave 400 of the file: less than half a packet, so all 1,400 go.
    assert size(eng, job(100_000), 0, 1400) == 1400
    assert size(eng, job(100_000), 0, 1600) == 1000


def test_packets_shrink_as_the_job_nears_its_end() -> None:
    eng = engine(CONFIG, PACKETS)
    running(eng, 0, IntervalSet.range(0, 1000), 0.001)
    running(eng, 1, IntervalSet.range(1000, 2000), 0.001)
    # 1,200 events left on two nodes: 0.6 s each, a quarter of it is 0.15 s: 150 events.
    assert size(eng, job(2000, done=800), 800, 100_000) == 150
    # Never below the minimum.
    assert size(eng, job(2000, done=1990), 1990, 100_000) == 50


def test_bad_packet_settings_name_their_field() -> None:
    with pytest.raises(ValueError, match="target_s: must be positive"):
        PacketSizing(target_s=0)
    with pytest.raises(ValueError, match="min_events: must be >= 1"):
        PacketSizing(min_events=500, max_events=100)
    with pytest.raises(ValueError, match="chunksize: must be at least 1"):
        PacketSizing(chunksize=0)
    with pytest.raises(ValueError, match="queue_s: must be positive"):
        EngineConfig(queue_s=0)


def test_shrink_releases_only_what_is_not_sent_yet() -> None:
    eng = engine(CONFIG)
    running(eng, 0, IntervalSet.range(0, 1000), 0.001)
    eng.slots[0].todo = IntervalSet.range(400, 1000)  # [0, 400) is in flight or done
    answer = eng._shrink(Shrink(subjob_id=0, slot=0, release=IntervalSet.range(300, 700)))
    assert answer.released == IntervalSet.range(400, 700)
    assert eng.slots[0].todo == IntervalSet.range(700, 1000)
    subjob = eng.slots[0].subjob
    assert subjob is not None
    assert subjob.data == IntervalSet([(0, 400), (700, 1000)])


def test_shrink_of_a_subjob_no_longer_running_releases_nothing() -> None:
    eng = engine(CONFIG)
    answer = eng._shrink(Shrink(subjob_id=5, slot=1, release=IntervalSet.range(0, 10)))
    assert not answer.released
    assert answer.subjob_id == 5
    assert answer.slot == 1


class FakeTime:
    """A clock that moves only when slept on, recording each sleep; ``at`` makes something
    happen once the clock has reached a time (a peer's fetch ending): no thread, no wall
    clock, the same sleeps on any machine."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self._due: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        # A wait that forgot its bound would otherwise poll this clock for ever.
        assert self.now < 60, "waited a minute: the wait has no bound"
        for item in [d for d in self._due if d[0] <= self.now]:
            self._due.remove(item)
            item[1]()

    def at(self, when_s: float, action: Callable[[], None]) -> None:
        self._due.append((when_s, action))


class Peer:
    """A peer's cache as the reader sees it through the peer's handler: ``state`` is what
    the handler answers (cached, fetching or absent)."""

    def __init__(self, state: str) -> None:
        self.now = state

    def state(self) -> str:
        return self.now

    def fetch_ends(self, ok: bool) -> Callable[[], None]:
        """The end of the peer's fetch: the file cached (or not: the fetch failed)."""

        def end() -> None:
            self.now = "cached" if ok else "absent"

        return end


def wait(peer: Peer, throttle: Throttle, n_bytes: int, fake: FakeTime) -> bool:
    return await_peer(
        peer.state, peer_wait_s(throttle, n_bytes), clock=fake.clock, sleep=fake.sleep
    )


def assert_waited(fake: FakeTime, seconds: float) -> None:
    """It polled until ``seconds`` had passed and at most one poll longer (1e-9: the sum of
    the polls' floats)."""
    assert fake.slept
    assert all(s == PEER_POLL_S for s in fake.slept)
    assert seconds - 1e-9 <= sum(fake.slept) <= seconds + PEER_POLL_S + 1e-9


def test_a_peer_copy_that_is_there_is_read_at_once() -> None:
    fake = FakeTime()
    assert wait(Peer("cached"), Throttle(1.0), 10**9, fake)
    assert fake.slept == []


def test_a_reader_waits_for_the_peers_fetch_in_flight() -> None:
    peer, fake = Peer("fetching"), FakeTime()
    fake.at(0.2, peer.fetch_ends(ok=True))
    # Our own fetch of 1 MB at 1 MB/s would take 1 s: waiting 0.2 s for the peer is better.
    assert wait(peer, Throttle(1e6), 10**6, fake)
    # It polled until the copy was there, and no longer.
    assert_waited(fake, 0.2)


def test_a_failed_peer_fetch_sends_the_reader_to_tertiary_storage() -> None:
    peer, fake = Peer("fetching"), FakeTime()
    fake.at(0.1, peer.fetch_ends(ok=False))
    assert not wait(peer, Throttle(1e6), 10**6, fake)
    # It gave up as soon as the fetch failed, well before the 1 s of a fetch of its own.
    assert_waited(fake, 0.1)


def test_the_wait_is_bounded_by_the_time_of_a_fetch_of_our_own() -> None:
    fake = FakeTime()  # a peer that never finishes
    assert not wait(Peer("fetching"), Throttle(1e6), 200_000, fake)  # 0.2 s of our own
    assert_waited(fake, 0.2)


def test_the_wait_without_a_rate_is_bounded_by_a_second() -> None:
    fake = FakeTime()
    assert not wait(Peer("fetching"), Throttle(None), 10**9, fake)
    assert_waited(fake, 1.0)


def test_no_peer_fetch_means_no_wait() -> None:
    fake = FakeTime()
    assert not wait(Peer("absent"), Throttle(1e6), 10**9, fake)
    assert fake.slept == []
