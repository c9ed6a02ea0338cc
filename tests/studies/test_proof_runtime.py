"""The PROOF uneven-data job on a local Dask cluster (studies/proof/runtime_uneven.py): the setup,
the measures of a run on hand-made packets, and one small run of both packetizers."""

from __future__ import annotations

from pathlib import Path

import pytest

from datasched.core.intervals import IntervalSet
from datasched.monitoring import active_workers
from datasched.runtime.monitor import packet_rows
from datasched.runtime.reports import PacketStat
from datasched.studies.proof.runtime_uneven import (
    RuntimeUneven,
    RuntimeUnevenRun,
    run_uneven_runtime,
)


def packet(node: str, start: int, t0: float, t1: float, source: str = "cache") -> PacketStat:
    return PacketStat(
        job="j",
        node=node,
        url="f",
        start=start,
        stop=start + 10,
        source=source,
        bytes_from_tertiary=0,
        bytes_from_peer=0,
        read_s=0.0,
        compute_s=t1 - t0,
        t_start=t0,
        t_end=t1,
    )


def test_tail_fraction_and_idle_time_on_hand_made_packets() -> None:
    # Four workers: all busy for [0, 6); then only worker 0 until 10 (fewer than half).
    packets = (
        packet("0", 0, 0.0, 5.0),
        packet("0", 10, 5.5, 10.0),  # 0.5 s between its packets
        packet("1", 20, 0.0, 6.0),
        packet("2", 30, 0.0, 6.0),
        packet("3", 40, 0.0, 6.0),
    )
    run = RuntimeUnevenRun("p", 10.0, packets, workers=4)
    # [5, 5.5): three active (not fewer than two); [6, 10): one active.
    assert run.tail_fraction == pytest.approx(4.0 / 10.0)
    assert run.idle_between_s == pytest.approx(0.5)


def test_a_worker_running_two_packets_at_once_is_one_active_worker() -> None:
    """A runtime worker runs a slot's threads side by side: worker 0's two packets at once
    make it one active worker, not two, against half of the four workers."""
    packets = (
        packet("0", 0, 0.0, 10.0),
        packet("0", 10, 0.0, 10.0),
        packet("1", 20, 0.0, 4.0),
    )
    assert active_workers(packet_rows(packets)) == [(0.0, 2), (4.0, 1), (10.0, 0)]
    # [0, 4): two of four active, not fewer than half; [4, 10): one.
    assert RuntimeUnevenRun("p", 10.0, packets, workers=4).tail_fraction == pytest.approx(0.6)


def test_bad_setups_name_their_field() -> None:
    with pytest.raises(ValueError, match="workers: must be at least 1"):
        RuntimeUneven(workers=0)
    with pytest.raises(ValueError, match="servers: must not be negative"):
        RuntimeUneven(servers=-1)
    topology = RuntimeUneven(workers=2, servers=1).topology(10**9, 1e6)
    assert [n.slots for n in topology.nodes] == [1, 1, 0]


def test_both_packetizers_process_every_event_once_reading_data_where_it_lies(
    tmp_path: Path,
) -> None:
    setup = RuntimeUneven(workers=2, servers=1, files=6, file_events=500, cpu_ms_per_event=0.2)
    placement = setup.placement()
    assert 0 < placement.count(2) < setup.files  # files on the file server and on workers
    for run in run_uneven_runtime(setup, tmp_path):
        covered = IntervalSet((p.start, p.stop) for p in run.packets)
        assert covered == IntervalSet.range(0, setup.files * setup.file_events), run.policy
        assert sum(p.stop - p.start for p in run.packets) == covered.length
        assert {p.node for p in run.packets} <= {"0", "1"}  # the file server runs none
        # Every file is read where it lies: a worker's own cache, or a peer's (the file
        # server's, or the other worker's); nothing from the files' original place.
        assert {p.source for p in run.packets} <= {"cache", "peer", "staged"}, run.policy
        assert any(p.source == "cache" for p in run.packets), run.policy
        assert 0.0 <= run.tail_fraction <= 1.0
        assert run.time_s > 0
