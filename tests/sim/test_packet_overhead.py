"""The cost model's fixed cost per packet (``CostModel.packet_overhead_s``): the runtime's
round trip through the master and Dask, which the simulator charges once per packet the
runtime would cut. Nil by default, so every simulation is the one it was; a positive cost
lengthens a run by about its packets times the cost over the nodes working in parallel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, ModelError, Pipelining, Topology
from datasched.core.packets import PacketDepth, PacketSizing
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine, SimRun

FILE_EVENTS = 100
JOB_EVENTS = 500  # five files a job
N_JOBS = 4
NODES = 2
CPU_S = 0.01  # 1 s of CPU a file


def _run(
    cost: CostModel,
    *,
    policy: str = "farm",
    cache_files: int = 0,
    chunksize: int | None = None,
) -> SimRun:
    data = DataSpace.uniform(N_JOBS * JOB_EVENTS, 1000.0, file_events=FILE_EVENTS)
    built = build_policy(policy)
    built.packet_sizing = PacketSizing(target_s=60.0, chunksize=chunksize)
    topology = Topology.uniform(NODES, cache_files * FILE_EVENTS * 1000.0)
    sched = Scheduler(topology, data, built, cost=cost)
    jobs = [
        Job(i, 0.0, IntervalSet.range(i * JOB_EVENTS, (i + 1) * JOB_EVENTS)) for i in range(N_JOBS)
    ]
    return SimEngine(sched).run(jobs)


def _makespan(run: SimRun) -> float:
    return max(r.end_s for r in run.jobs)


COST = CostModel(cpu_s_per_event=CPU_S, disk_bytes_per_s=1e9, pipelining=Pipelining.TERTIARY)


@pytest.mark.parametrize("policy", ["farm", "out-of-order"])
def test_no_cost_per_packet_changes_nothing(policy: str) -> None:
    explicit = _run(replace(COST, packet_overhead_s=0.0), policy=policy, cache_files=3)
    default = _run(COST, policy=policy, cache_files=3)
    assert explicit.jobs == default.jobs
    charged = _run(replace(COST, packet_overhead_s=0.1), policy=policy, cache_files=3)
    assert _makespan(charged) > _makespan(default)


def test_a_cost_per_packet_lengthens_the_run_by_packets_times_cost_over_nodes() -> None:
    base = _makespan(_run(COST))
    cost = 0.5
    longer = _makespan(_run(replace(COST, packet_overhead_s=cost)))
    # Every file read is at least one packet: 20 packets shared by 2 nodes.
    packets = N_JOBS * JOB_EVENTS // FILE_EVENTS
    assert longer - base == pytest.approx(packets * cost / NODES, rel=0.25)


def test_the_packets_are_cut_by_the_runtimes_rule_and_each_charged() -> None:
    """One job of one file of 1,000 events, 10 s of CPU, on one node, the default packetizer
    (an aim of 2 s, at least 100 events): the runtime's slot cuts 200 events (the aim), 200,
    200, then a quarter of what the job has left (its events whose results are not back:
    the uncut ones and the packet in flight): 150 of 400 + 200, 100 of 250 + 150, and the
    last 150 (a quarter of 150 + 100 is below the least, 100, and a packet of 100 would
    leave no more than half a packet of the file, so the rest of it goes): six packets, not
    the five that the aim alone gives. Each pays the cost."""
    data = DataSpace.uniform(1000, 1000.0, file_events=1000)
    built = build_policy("farm")
    cost = 0.1

    def makespan(c: CostModel) -> float:
        sched = Scheduler(Topology.uniform(1, 0.0), data, built, cost=c)
        return _makespan(SimEngine(sched).run([Job(0, 0.0, IntervalSet.range(0, 1000))]))

    assert makespan(COST) == pytest.approx(10.0)
    assert makespan(replace(COST, packet_overhead_s=cost)) == pytest.approx(10.0 + 6 * cost)
    # A runtime that keeps more in flight (10 s of work queued: six packets of 2 s) counts
    # five packets' events as not back when it cuts the next: the quarter never binds, and
    # the aim cuts five packets of 200 events.
    deep = Scheduler(
        Topology.uniform(1, 0.0), data, built, cost=replace(COST, packet_overhead_s=cost)
    )
    run = SimEngine(deep, in_flight=PacketDepth(queue_s=10.0)).run(
        [Job(0, 0.0, IntervalSet.range(0, 1000))]
    )
    assert _makespan(run) == pytest.approx(10.0 + 5 * cost)
    # The master's queue serves the same six packets.
    sched = Scheduler(
        Topology.uniform(1, 0.0), data, built, cost=replace(COST, master_s_per_packet=0.01)
    )
    assert SimEngine(sched).run([Job(0, 0.0, IntervalSet.range(0, 1000))]).master_packets == 6


def test_a_chunksize_cuts_more_packets_and_charges_each() -> None:
    # A file takes about 1 s (its CPU; its read overlaps): a chunksize of 25 events cuts 4
    # packets of it, so the cost is paid four times as often as with one packet a file.
    cost = 0.1
    one = _makespan(_run(replace(COST, packet_overhead_s=cost))) - _makespan(_run(COST))
    four = _makespan(_run(replace(COST, packet_overhead_s=cost), chunksize=25)) - _makespan(
        _run(COST, chunksize=25)
    )
    assert four == pytest.approx(4 * one, rel=0.25)
    assert one > 0


def test_a_negative_cost_per_packet_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match="packet_overhead_s"):
        CostModel(packet_overhead_s=-0.1)
