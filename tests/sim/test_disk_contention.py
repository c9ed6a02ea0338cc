"""Disks whose total rate falls with their readers (``CostModel.disk_contention``): off (0) it
changes nothing, on it slows every reader of a crowded disk more than a fair share would, and
PROOF's uneven job runs under it."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from clusters import placed_space, servers_and_workers
from datasched.core.model import CostModel, Job, ModelError
from datasched.core.scheduler import Scheduler
from datasched.sim.disks import disk_capacity
from datasched.sim.engine import SimEngine, SimRun
from datasched.studies.proof.runs import ADAPTIVE, BASIC, run_uneven
from datasched.studies.proof.setup import UnevenSetup
from sim.test_shared_disks import FILE, WholeJobs, ends, files


def simulate(readers: int, contention: float, *, disk: float = 6e6) -> SimRun:
    topology = servers_and_workers(readers, 1)
    cost = CostModel(
        cpu_s_per_event=0.1, disk_bytes_per_s=disk, shared_disks=True, disk_contention=contention
    )
    space = placed_space([readers] * readers, FILE)
    sched = Scheduler(topology, space, WholeJobs(), cost=cost)
    return SimEngine(sched, check_conservation=True).run(
        [Job(i, 0.0, files(i)) for i in range(readers)]
    )


def test_capacity_by_readers() -> None:
    cost = CostModel(disk_bytes_per_s=60e6, shared_disks=True, disk_contention=0.5)
    assert [disk_capacity(cost, n) for n in (0, 1, 2, 3, 5)] == pytest.approx(
        [60e6, 60e6, 40e6, 30e6, 20e6]
    )
    flat = dataclasses.replace(cost, disk_contention=0.0)
    assert {disk_capacity(flat, n) for n in range(1, 9)} == {60e6}


def test_a_negative_coefficient_is_refused() -> None:
    with pytest.raises(ModelError, match="disk_contention"):
        CostModel(disk_contention=-0.1)


@pytest.mark.parametrize("readers", [1, 2, 3, 4])
def test_zero_is_the_fair_share_of_today(readers: int) -> None:
    """The same end times as ``test_readers_of_one_server_share_its_disk``: 20, 20, 30, 40 s."""
    assert ends(simulate(readers, 0.0)) == pytest.approx([max(20.0, 10.0 * readers)] * readers)


@pytest.mark.parametrize(("readers", "end_s"), [(1, 20.0), (2, 20.0 * 1.5), (4, 40.0 * 2.5)])
def test_a_server_s_throughput_falls_with_its_readers(readers: int, end_s: float) -> None:
    """An event: 0.1 s of CPU and 600 KB from a 6 MB/s disk. With c = 0.5 two readers share
    4 MB/s (0.3 s an event, where a fair share of 6 MB/s gave 0.2), four share 2.4 MB/s
    (1 s an event against 0.4): alone nothing changes."""
    run = simulate(readers, 0.5)
    assert ends(run) == pytest.approx([end_s] * readers)
    assert run.events_processed == readers * FILE


def test_the_uneven_job_unchanged_at_zero_and_slower_above() -> None:
    """PROOF's uneven job, scaled down: with c = 0 both packetizers' packets are those of the
    model without the field; with c = 0.3 the job takes longer, and every event is processed
    once under both."""
    setup = UnevenSetup(workers=4, servers=4, files=24, file_events=200)
    base = {p: run_uneven(setup, p, 1) for p in (BASIC, ADAPTIVE)}
    zero = {p: run_uneven(replace(setup, disk_contention=0.0), p, 1) for p in (BASIC, ADAPTIVE)}
    slow = {p: run_uneven(replace(setup, disk_contention=0.3), p, 1) for p in (BASIC, ADAPTIVE)}
    for p in (BASIC, ADAPTIVE):
        assert zero[p].end_s == base[p].end_s
        assert zero[p].packets == base[p].packets
        assert slow[p].end_s > base[p].end_s
        assert sum(r.events for r in slow[p].packets) == 24 * 200
