"""Disks shared by their readers (``CostModel.shared_disks``): fair shares by hand, subjobs
re-timed as readers come and go, and nothing changed when the switch is off."""

from __future__ import annotations

import pytest

from clusters import EVENT_BYTES, placed_space, servers_and_workers
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Topology
from datasched.core.policy import JobView, Policy, ReadMode, SchedulerView
from datasched.core.scheduler import Scheduler
from datasched.sim.disks import fair_shares
from datasched.sim.engine import SimEngine, SimRun

FILE = 100
"""Events a file."""


class WholeJobs(Policy):
    """Each job whole on the lowest free slot, reading data where it lies."""

    reads = ReadMode(peer_reads=True)

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        if sched.idle_slots:
            sched.start(sched.new_subjob(js, js.job.data), sched.idle_slots[0])
        else:
            sched.queue_job(js)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        js = sched.pop_queued_job()
        if js is not None:
            sched.start(sched.new_subjob(js, js.job.data), slot)


def files(*indices: int) -> IntervalSet:
    return IntervalSet((i * FILE, (i + 1) * FILE) for i in indices)


def simulate(
    topology: Topology,
    placement: list[int],
    jobs: list[tuple[float, IntervalSet]],
    *,
    disk: float,
    shared: bool = True,
) -> SimRun:
    cost = CostModel(cpu_s_per_event=0.1, disk_bytes_per_s=disk, shared_disks=shared)
    sched = Scheduler(topology, placed_space(placement, FILE), WholeJobs(), cost=cost)
    engine = SimEngine(sched, check_conservation=True)
    return engine.run([Job(i, t, data) for i, (t, data) in enumerate(jobs)])


def ends(run: SimRun) -> list[float]:
    return [j.end_s for j in sorted(run.jobs, key=lambda j: j.job_id)]


def test_fair_shares_by_hand() -> None:
    assert fair_shares(60.0, []) == []
    assert fair_shares(60.0, [30.0, 30.0]) == [30.0, 30.0]
    assert fair_shares(60.0, [30.0, 30.0, 30.0]) == [20.0, 20.0, 20.0]
    assert fair_shares(60.0, [50.0, 10.0, 50.0]) == [25.0, 10.0, 25.0]
    assert fair_shares(60.0, [5.0, 10.0]) == [5.0, 10.0]


@pytest.mark.parametrize(("readers", "end_s"), [(1, 20.0), (2, 20.0), (3, 30.0), (4, 40.0)])
def test_readers_of_one_server_share_its_disk(readers: int, end_s: float) -> None:
    """An event: 0.1 s of CPU and 600 KB from a 6 MB/s disk (0.1 s): alone 0.2 s, reading
    3 MB/s. Two readers fill the disk; three get 2 MB/s each, 0.3 s an event."""
    topology = servers_and_workers(4, 1)
    jobs = [(0.0, files(i)) for i in range(readers)]
    run = simulate(topology, [4] * 4, jobs, disk=6e6)
    assert ends(run) == pytest.approx([end_s] * readers)
    off = simulate(topology, [4] * 4, jobs, disk=6e6, shared=False)
    assert ends(off) == pytest.approx([20.0] * readers)


def test_a_late_reader_slows_the_others_from_then_on() -> None:
    """A and B alone until 5 s (25 events each at 0.2 s), then three readers at 0.3 s: A and
    B end at 27.5 s; C, 75 events done by then, does its last 25 alone: 32.5 s."""
    topology = servers_and_workers(3, 1)
    jobs = [(0.0, files(0)), (0.0, files(1)), (5.0, files(2))]
    run = simulate(topology, [3, 3, 3], jobs, disk=6e6)
    assert ends(run) == pytest.approx([27.5, 27.5, 32.5])
    assert run.events_processed == 300


def test_a_node_s_own_reads_count_among_its_readers() -> None:
    """Node 0 reads its own file while two other nodes read its other files: three readers."""
    topology = servers_and_workers(3, 0)
    jobs = [(0.0, files(0)), (0.0, files(1)), (0.0, files(2))]
    run = simulate(topology, [0, 0, 0], jobs, disk=6e6)
    assert ends(run) == pytest.approx([30.0, 30.0, 30.0])
    assert run.events_by_source == [100, 200, 0]


def test_a_subjob_moves_from_disk_to_disk() -> None:
    """X reads f0 on server A, then f1 on server B; Y reads f2 and f3 on B. With a 4.5 MB/s
    disk an event takes 0.2333 s alone and 0.2667 s with two readers. Both are alone until
    23.33 s (100 events each), then share B for their last 100: both end at 50 s."""
    topology = servers_and_workers(2, 2)
    jobs = [(0.0, files(0, 1)), (0.0, files(2, 3))]
    run = simulate(topology, [2, 3, 3, 3], jobs, disk=4.5e6)
    assert ends(run) == pytest.approx([50.0, 50.0])
    assert run.events_by_source == [0, 400, 0]


def test_placed_files_are_cached_pinned_and_known_to_the_scheduler() -> None:
    topology = servers_and_workers(2, 1)
    cost = CostModel(cpu_s_per_event=0.1)
    sched = Scheduler(topology, placed_space([0, 2, 2], FILE), WholeJobs(), cost=cost)
    engine = SimEngine(sched)
    engine.run([])
    assert sched.directory.content(2) == files(1, 2)
    assert sched.directory.content(0) == files(0)
    assert engine.caches[2].pinned == files(1, 2)


def test_files_placed_beyond_a_cache_are_refused() -> None:
    small = servers_and_workers(1, 1, cache_events=FILE)
    sched = Scheduler(small, placed_space([1, 1], FILE), WholeJobs())
    with pytest.raises(ValueError, match="replicas: the files placed on node 1"):
        SimEngine(sched).run([])


def test_the_packet_log_records_every_subjob() -> None:
    topology = servers_and_workers(2, 1)
    cost = CostModel(cpu_s_per_event=0.1, disk_bytes_per_s=6e6)
    sched = Scheduler(topology, placed_space([0, 2], FILE), WholeJobs(), cost=cost)
    run = SimEngine(sched, record_packets=True).run([Job(0, 0.0, files(0)), Job(1, 0.0, files(1))])
    assert run.packets is not None
    local, remote = sorted(run.packets, key=lambda p: p.job_id)
    assert (local.node, local.source, local.peer, local.events) == (0, 0, -1, FILE)
    assert (remote.node, remote.source, remote.peer, remote.file) == (1, 1, 2, 1)
    assert remote.n_bytes == pytest.approx(FILE * EVENT_BYTES)
    assert remote.cpu_s == pytest.approx(FILE * 0.1)
    assert remote.finished


def test_a_closed_workload_submits_each_next_job_when_the_last_ends() -> None:
    topology = servers_and_workers(1, 0)
    sched = Scheduler(topology, placed_space([0, 0], FILE), WholeJobs())
    seen: list[tuple[int, float]] = []

    def follow_up(done: Job, now: float) -> Job | None:
        seen.append((done.job_id, now))
        if done.job_id >= 3:
            return None
        return Job(done.job_id + 1, now, files(done.job_id % 2), user=done.user)

    run = SimEngine(sched, check_conservation=True).run(
        [Job(0, 0.0, files(0))], follow_up=follow_up
    )
    assert [job for job, _ in seen] == [0, 1, 2, 3]
    assert run.jobs_completed == 4
    submitted = sorted((j.job_id, j.submit_s) for j in run.jobs)
    assert submitted == [(0, 0.0)] + [(job + 1, at) for job, at in seen[:3]]
