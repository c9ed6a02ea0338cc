"""The master as a queue of one (``CostModel.master_s_per_packet``, sim/master.py): each
packet's service there is serial, so packets ending together wait their turn, and a master
slower than the nodes bounds the run at its packets times the service; a slot computes its
next packet during a turn and waits only for what the turn outlasts. Nil by default, so
every simulation is the one it was. Each case is worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import assert_each_event_once, scheduler, space
from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, ModelError, Pipelining, Topology
from datasched.core.packets import PacketSizing
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine, SimRun
from datasched.sim.faults import NodeFaults
from datasched.sim.master import MasterQueue
from strategies import job_lists

FILE_EVENTS = 100
CPU_S = 0.01  # 1 s of CPU a file; its read (0.1 s) overlaps with it
COST = CostModel(cpu_s_per_event=CPU_S, disk_bytes_per_s=1e9, pipelining=Pipelining.TERTIARY)


def _run(
    cost: CostModel,
    *,
    nodes: int,
    jobs: int,
    files_a_job: int = 1,
    policy: str = "farm",
    chunksize: int | None = None,
) -> SimRun:
    """``jobs`` jobs of ``files_a_job`` files each, all submitted at 0, on ``nodes`` one-slot
    nodes without caches."""
    events = files_a_job * FILE_EVENTS
    data = DataSpace.uniform(jobs * events, 1000.0, file_events=FILE_EVENTS)
    built = build_policy(policy)
    built.packet_sizing = PacketSizing(target_s=60.0, chunksize=chunksize)
    sched = Scheduler(Topology.uniform(nodes, 0.0), data, built, cost=cost)
    return SimEngine(sched).run(
        [Job(i, 0.0, IntervalSet.range(i * events, (i + 1) * events)) for i in range(jobs)]
    )


def _ends(run: SimRun) -> list[float]:
    return sorted(r.end_s for r in run.jobs)


# -- the calendar alone ------------------------------------------------------------------------


def test_packets_are_served_first_come_one_at_a_time() -> None:
    q = MasterQueue()
    assert q.serve(1.0, 0.01) == 1.0
    assert q.serve(1.0, 0.01) == pytest.approx(1.01)
    assert q.serve(1.0, 0.01) == pytest.approx(1.02)  # the third waits 20 ms
    assert q.serve(1.025, 0.01) == pytest.approx(1.03)  # still busy: waits 5 ms
    assert q.serve(5.0, 0.01) == 5.0  # an idle master serves at once
    assert q.served == 5
    assert q.free_at == pytest.approx(5.01)


def test_a_service_of_no_time_is_refused() -> None:
    with pytest.raises(ValueError, match="service"):
        MasterQueue().serve(0.0, 0.0)


# -- in the simulator --------------------------------------------------------------------------


def test_no_master_cost_changes_nothing() -> None:
    for policy in ("farm", "out-of-order"):
        default = _run(COST, nodes=2, jobs=4, files_a_job=3, policy=policy)
        explicit = _run(
            replace(COST, master_s_per_packet=0.0), nodes=2, jobs=4, files_a_job=3, policy=policy
        )
        assert explicit.jobs == default.jobs


def test_three_packets_ending_at_once_queue_at_the_master() -> None:
    # Three nodes each run one packet of 1 s, all ending at 1 s; the master takes 10 ms a
    # packet: the first is served at once, the second waits 10 ms, the third 20 ms.
    base = _ends(_run(COST, nodes=3, jobs=3))
    assert base == pytest.approx([1.0, 1.0, 1.0])
    queued = _ends(_run(replace(COST, master_s_per_packet=0.01), nodes=3, jobs=3))
    assert queued == pytest.approx([1.01, 1.02, 1.03])


def test_packets_of_one_node_never_wait_for_each_other() -> None:
    # One node, five files of 1 s; the master takes 0.1 s a packet. The slot has its next
    # packet in hand when one ends, so each of the first four turns passes while it
    # computes the next (1 s); only the last turn adds its 0.1 s: the job has its result
    # when the master has it.
    run = _run(replace(COST, master_s_per_packet=0.1), nodes=1, jobs=1, files_a_job=5)
    assert _ends(run) == pytest.approx([5.0 + 0.1])


def test_a_turn_longer_than_the_next_packet_idles_the_slot_by_the_difference() -> None:
    # One node, three files of 1 s; the master takes 1.5 s a packet. Packet 1 ends at 1,
    # its turn lasts to 2.5: packet 2 computes meanwhile and the slot waits 0.5 s for
    # packet 3, which runs 2.5 to 3.5 (charged before packet 2 here: the same end). Turn 2,
    # reaching the master at 2 (at 2.5 here), is served 2.5 to 4; turn 3 reaches it at 3.5,
    # waits for it, and is served 4 to 5.5, when the job ends. (A runtime with the
    # packets in flight ends at 5.5 too.)
    run = _run(replace(COST, master_s_per_packet=1.5), nodes=1, jobs=1, files_a_job=3)
    assert _ends(run) == pytest.approx([5.5])


def test_two_nodes_keep_a_master_busy_without_waiting() -> None:
    # Two nodes, two jobs of five files each; the master takes 0.5 s a packet, so the two
    # nodes' packets (one a second each) keep it busy. Each second both packets end
    # together: A's is served in the first half second, B's in the second, both within
    # the next packet's second, so neither node waits. At 5 the last packets' turns are
    # whole: A's 5 to 5.5, B's 5.5 to 6.
    run = _run(replace(COST, master_s_per_packet=0.5), nodes=2, jobs=2, files_a_job=5)
    assert _ends(run) == pytest.approx([5.5, 6.0])


def test_a_master_slower_than_the_nodes_bounds_the_run() -> None:
    # Eight nodes, 40 packets of 1 s; the master takes 0.5 s a packet, so it serves two a
    # second while the nodes could end eight. The first packets reach it at 1 s; from then
    # on it is never idle (each node is back within 1.5 s, before the seven others are
    # served): 1 s + 40 x 0.5 s, not the nodes' 5 s.
    cost = replace(COST, master_s_per_packet=0.5)
    free = max(_ends(_run(COST, nodes=8, jobs=8, files_a_job=5)))
    assert free == pytest.approx(5.0)
    bound = max(_ends(_run(cost, nodes=8, jobs=8, files_a_job=5)))
    assert bound == pytest.approx(1.0 + 40 * 0.5)


def test_each_packet_of_a_file_is_queued() -> None:
    # One node, one file of 1 s cut into four packets (a chunksize of 25 events; a file of
    # 100 events is one packet otherwise: the packetizer's least is 100 events): four
    # services of 0.1 s, the first three within the next packet's 0.25 s, the last one whole.
    run = _run(replace(COST, master_s_per_packet=0.1), nodes=1, jobs=1, chunksize=25)
    assert _ends(run) == pytest.approx([1.0 + 0.1])
    assert run.master_packets == 4
    # At 0.3 s a packet the master outlasts each next packet by 0.05 s: three waits.
    run = _run(replace(COST, master_s_per_packet=0.3), nodes=1, jobs=1, chunksize=25)
    assert _ends(run) == pytest.approx([1.0 + 3 * 0.05 + 0.3])


def test_a_negative_master_cost_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match="master_s_per_packet: must not be negative"):
        CostModel(master_s_per_packet=-0.01)


@pytest.mark.parametrize("policy", ["farm", "out-of-order", "basic-packetizer"])
@settings(max_examples=8, deadline=None)
@given(
    jobs=job_lists(max_jobs=8),
    nodes=st.integers(1, 4),
    slots=st.sampled_from([1, 2]),
    cache_events=st.sampled_from([0, 150, 1000]),
    file_events=st.sampled_from([0, 25]),
    master_s=st.sampled_from([0.5, 5.0, 50.0]),
    seed=st.integers(0, 3),
    peer_reads=st.booleans(),
    shared_disks=st.booleans(),
)
def test_with_a_master_queue_every_event_is_processed_once_despite_faults(
    policy: str,
    jobs: list[Job],
    nodes: int,
    slots: int,
    cache_events: int,
    file_events: int,
    master_s: float,
    seed: int,
    peer_reads: bool,
    shared_disks: bool,
) -> None:
    """Stops (faults), shrinks (out-of-order's steals), pull packets and re-timed
    stretches of shared disks with the master's turns among a subjob's segments: no event
    lost or done twice, every job completes, and the master served a packet at least for
    each job."""
    _check(policy, jobs, nodes, slots, cache_events, file_events, master_s, seed, peer_reads,
           shared_disks)  # fmt: skip


@pytest.mark.parametrize("shared_disks", [False, True])
def test_a_node_lost_while_two_slots_of_a_job_wait_at_the_master_ends_it_once(
    shared_disks: bool,
) -> None:
    # One node of two slots runs both halves of job 1; each has processed all its events
    # and waits its turn at a slow master when the node fails: both come back with nothing
    # left, and the job completes once (the scheduler once completed it for each).
    jobs = [Job(0, 0.0, IntervalSet.range(0, 1)), Job(1, 0.0, IntervalSet.range(0, 314))]
    jobs += [Job(i, 0.0, IntervalSet.range(0, 1)) for i in (2, 3, 4)]
    _check("out-of-order", jobs, 1, 2, 0, 0, 50.0, 2, False, shared_disks)


def _check(
    policy: str,
    jobs: list[Job],
    nodes: int,
    slots: int,
    cache_events: int,
    file_events: int,
    master_s: float,
    seed: int,
    peer_reads: bool,
    shared_disks: bool,
) -> None:
    sched = scheduler(
        policy,
        nodes,
        cache_events,
        min_subjob=3,
        slots=slots,
        data=space(file_events),
        params={"replication": True} if peer_reads and policy == "out-of-order" else None,
        pipelining=Pipelining.TERTIARY,
    )
    sched.cost = replace(sched.cost, master_s_per_packet=master_s, shared_disks=shared_disks)
    faults = NodeFaults(mtbf_h=300.0 / 3600, repair_h=30.0 / 3600, seed=seed)
    engine = SimEngine(sched, check_conservation=True, faults=faults)
    run = engine.run(jobs)
    assert_each_event_once(run.processed, jobs)
    assert run.jobs_completed == len(jobs)
    assert engine._master is not None
    assert engine._master.served >= sum(1 for j in jobs if j.data)
