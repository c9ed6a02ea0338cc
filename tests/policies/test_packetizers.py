"""PROOF's packetizers: packet sizes by hand, within their bounds and shrinking to the end; the
limit on workers per file server; local data first (basic) or remote data early (adaptive);
every event in exactly one packet with data on file servers, disks shared and nodes failing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import EVENT_BYTES, assert_each_event_once, placed_space, servers_and_workers, space
from datasched.core.actions import Action, Assign
from datasched.core.events import Event
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.policies.proof.packetizers import AdaptivePacketizer, BasicPacketizer
from datasched.sim.engine import SimEngine, SimRun
from datasched.sim.faults import NodeFaults
from strategies import placements

FILE = 40


def central(start: int, stop: int) -> list[tuple[int, int, int | None]]:
    """Every event in central storage only."""
    return [(start, stop, None)]


def drain(pk: Any, slot: int, s_per_event: float) -> list[int]:
    """Ask for packets on ``slot`` until none is left, each taking ``s_per_event`` an event."""
    sizes = []
    while (got := pk.next_packet(slot)) is not None:
        piece, packet = got
        sizes.append(packet.length)
        pk.packet_done(slot, piece, packet.length, packet.length * s_per_event)
    return sizes


def test_adaptive_packet_sizes_by_hand() -> None:
    """One worker at 8 events/s on a file of 1,030 events: a calibration packet of 100, then
    a quarter of the time left at the measured rate, at most 20 s (160 events), shrinking to
    the 3 s floor (24 events); the last packet takes the 35 left, under 1.5 packets."""
    pk = AdaptivePacketizer(
        IntervalSet.range(0, 1030), [(0, 0, 1030)], central, calibration_events=100
    )
    pk.add_worker(0, host=0)
    # Seconds left = events left / 8, a packet min(max(that / 4, 3), 20) s at 8 events/s:
    # 930 and 770 left -> 20 s: 160; 610 -> 19.06 s: 152; 458 -> 14.3: 114; 344 -> 10.75:
    # 86; 258 -> 8.06: 64; 194 -> 6.06: 48; 146 -> 4.56: 36; 110 -> 3.44: 27; 83 and 59 ->
    # 3 s: 24; 35 left, no more than 1.5 packets: all of it.
    sizes = [100, 160, 160, 152, 114, 86, 64, 48, 36, 27, 24, 24, 35]
    assert drain(pk, 0, 0.125) == sizes


def test_basic_packets_are_a_fraction_of_the_workers_share_by_performance() -> None:
    """1,000 events, two workers, fraction 20: 25 events a packet; a worker of half the
    performance index gets 12."""
    pk = BasicPacketizer(IntervalSet.range(0, 1000), [(0, 0, 1000)], central, fraction=20)
    pk.add_worker(0, host=0, perf=100.0)
    pk.add_worker(1, host=1, perf=50.0)
    assert pk.next_packet(0)[1].length == 25  # type: ignore[index]
    assert pk.next_packet(1)[1].length == 12  # type: ignore[index]


def test_the_limit_refuses_a_worker_unless_forced() -> None:
    """Limit 1: while one worker reads the server, another is refused (and done with the
    job); the policy forces a packet only when nothing of the job runs any more."""
    on_server: list[tuple[int, int, int | None]] = [(0, 100, 9)]
    pk = BasicPacketizer(
        IntervalSet.range(0, 100), [(0, 0, 100)], lambda a, b: on_server, max_workers_per_node=1
    )
    pk.add_worker(0, host=0)
    pk.add_worker(1, host=1)
    assert pk.next_packet(0) is not None
    assert pk.next_packet(1) is None
    assert pk.workers[1].finished
    assert pk.next_packet(1, force=True) is not None


def assigned(sched: Scheduler) -> list[tuple[float, Assign]]:
    """Record every Assign the scheduler makes, with its time."""
    out: list[tuple[float, Assign]] = []
    handle = sched.handle

    def traced(event: Event) -> list[Action]:
        actions = handle(event)
        out.extend((event.time, a) for a in actions if isinstance(a, Assign))
        return actions

    sched.handle = traced  # type: ignore[method-assign]  # wrapped: the test watches each event
    return out


def test_adaptive_packets_last_three_to_twenty_seconds_and_shrink_at_the_end() -> None:
    """Four workers reading central storage (0.8 s an event, nobody sharing a link): after
    each worker's calibration packet, a packet lasts 3 to 20 s (to an event), and near the
    end of the job they shrink to the 3 s floor."""
    sched = Scheduler(
        Topology.uniform(4, 0.0), space(), build_policy("adaptive-packetizer"), cost=CostModel()
    )
    log = assigned(sched)
    SimEngine(sched, check_conservation=True).run([Job(0, 0.0, IntervalSet.range(0, 8000))])
    first: set[int] = set()
    durations = []
    for _, a in log:
        if a.slot not in first:
            first.add(a.slot)
            assert a.subjob.data.length == 1000  # the calibration packet
            continue
        durations.append(a.subjob.data.length * 0.8)
    last = durations.pop()  # the end of the file: what is left
    assert all(3.0 - 0.8 <= d <= 20.0 for d in durations)
    assert max(durations[: len(durations) // 2]) == pytest.approx(20.0, abs=0.8)
    # The floor: 3 s at 1.25 events/s, 3.75 events, rounded down to 3.
    assert durations[-4:] == pytest.approx([2.4] * 4)
    assert last <= 1.5 * 3 * 0.8


def uneven(policy: str, placement: list[int], **params: Any) -> tuple[SimRun, Topology]:
    """Three one-slot workers and three file servers; each file's node from ``placement``;
    disks of 6 MB/s shared by their readers."""
    topology = servers_and_workers(3, 3)
    data = placed_space(placement, FILE)
    cost = CostModel(cpu_s_per_event=0.1, disk_bytes_per_s=6e6, shared_disks=True)
    sched = Scheduler(topology, data, build_policy(policy, **params), cost=cost)
    engine = SimEngine(sched, record_packets=True, check_conservation=True)
    run = engine.run([Job(0, 0.0, IntervalSet.range(0, data.n_events))])
    assert run.jobs_completed == 1
    assert run.events_processed == data.n_events
    return run, topology


@settings(max_examples=30, deadline=None)
@given(placement=placements(6), limit=st.sampled_from([1, 2, 4]))
def test_basic_never_exceeds_its_workers_per_node(placement: list[int], limit: int) -> None:
    """At no moment do more workers from other nodes read a node than the limit leaves after
    its own workers (ROOT counts both); and nothing needs the limit set aside."""
    run, topology = uneven("basic-packetizer", placement, max_workers_per_node=limit)
    assert run.packets is not None
    assert run.policy_counters["forced packets"] == 0
    for node in set(placement):
        reads = [p for p in run.packets if p.peer == node]
        for p in reads:
            at_once = sum(1 for q in reads if q.start_s <= p.start_s < q.end_s)
            assert at_once <= limit - topology.nodes[node].slots


def test_basic_reads_local_data_first_and_adaptive_goes_remote_early() -> None:
    """Each worker holds two files, the servers the rest. The basic packetizer finishes a
    worker's local files before anything remote; the adaptive one sends workers to the
    servers while local data is left (a worker predicted to end early)."""
    placement = [0, 0, 1, 1, 2, 2] + [3] * 6 + [4] * 3 + [5] * 3
    for policy, remote_first in (("basic-packetizer", False), ("adaptive-packetizer", True)):
        run, _ = uneven(policy, placement)
        assert run.packets is not None
        interleaved = False
        for worker in range(3):
            mine = sorted((p for p in run.packets if p.slot == worker), key=lambda p: p.start_s)
            local = [p.start_s for p in mine if p.source == 0]
            remote = [p.start_s for p in mine if p.source != 0]
            interleaved |= bool(local and remote and min(remote) < max(local))
        assert interleaved == remote_first, policy


PULL_PARAMS = [
    ("basic-packetizer", {}),
    ("basic-packetizer", {"max_workers_per_node": 1}),
    ("adaptive-packetizer", {"calibration_events": 7, "min_packet_s": 1.0}),
    ("adaptive-packetizer", {"max_workers_per_node": 1, "calibration_events": 7}),
    ("adaptive-packetizer", {"priorities": "default=1", "calibration_events": 7}),
]


@settings(max_examples=40, deadline=None)
@given(
    setup=st.sampled_from(PULL_PARAMS),
    placement=placements(5),
    workers=st.integers(1, 3),
    slots=st.sampled_from([1, 2]),
    shared=st.booleans(),
    jobs=st.lists(
        st.tuples(st.sampled_from([0.0, 5.0, 60.0]), st.integers(0, 11)), min_size=1, max_size=4
    ),
    mtbf_s=st.sampled_from([20.0, 100.0, 1000.0]),
    seed=st.integers(0, 3),
)
def test_every_event_once_with_file_servers_and_failing_nodes(
    setup: tuple[str, dict[str, Any]],
    placement: list[int],
    workers: int,
    slots: int,
    shared: bool,
    jobs: list[tuple[float, int]],
    mtbf_s: float,
    seed: int,
) -> None:
    """Data on workers' and servers' disks, nodes (servers too) failing and coming back
    empty: every event processed exactly once, every job completes."""
    policy, params = setup
    topology = servers_and_workers(workers, 5 - workers, slots=slots)
    data = placed_space(placement, FILE)
    cost = CostModel(cpu_s_per_event=0.1, disk_bytes_per_s=6e6, shared_disks=shared)
    sched = Scheduler(topology, data, build_policy(policy, **params), cost=cost)
    faults = NodeFaults(mtbf_h=mtbf_s / 3600, repair_h=10.0 / 3600, seed=seed)
    engine = SimEngine(sched, check_conservation=True, faults=faults)
    arrivals = []
    for i, (t, first) in enumerate(jobs):
        first %= len(placement)
        arrivals.append(Job(i, t, IntervalSet.range(first * FILE, data.n_events)))
    run = engine.run(arrivals)
    assert_each_event_once(run.processed, arrivals)
    assert run.jobs_completed == len(arrivals)
    assert not sched.jobs


def test_placed_data_bytes_are_what_the_packets_read() -> None:
    run, _ = uneven("adaptive-packetizer", [3, 4, 5, 0])
    assert run.packets is not None
    assert sum(p.n_bytes for p in run.packets) == pytest.approx(4 * FILE * EVENT_BYTES)
