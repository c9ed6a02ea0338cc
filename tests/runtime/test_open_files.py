"""A worker keeps the files its packets opened, with their parsed trees, for the next packets
(runtime/events.OpenFiles): a packet of a file its node caches does not open it again, no
two threads read through one handle, a new copy of a file is opened afresh and the old
handle closed, the pool keeps within its branches and files, a file that broke a packet is
not kept; and the calibration measures what opening a copy costs, which the cost model
charges to events read from a copy new to the node only."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from datasched.core.model import CostModel, ModelError, Pipelining, Source
from datasched.runtime import calibrate as calibrate_module
from datasched.runtime import events as events_module
from datasched.runtime.calibrate import calibrate_packet
from datasched.runtime.demodata import DimuonMass
from datasched.runtime.events import OpenFiles, ReadSpec, open_events
from datasched.runtime.processor import ship
from datasched.runtime.worker import PacketSpec, packet_on
from runtime_support import fake_worker


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> OpenFiles:
    fresh = OpenFiles()
    monkeypatch.setattr(events_module, "OPEN", fresh)
    return fresh


def part(catalog: Path, i: int) -> str:
    return str(catalog.parent / f"part-{i:03d}.root")


def read_pt(path: str, a: int, b: int) -> list[float]:
    with open_events(path, path, "Events", ReadSpec(), a, b) as opened:
        return [float(x) for xs in opened.events["Muon_pt"].tolist() for x in xs]


def test_the_next_packet_of_a_file_reads_through_the_handle_kept_open(
    demo_catalog: Path, pool: OpenFiles
) -> None:
    path = part(demo_catalog, 0)
    first, second = read_pt(path, 0, 500), read_pt(path, 500, 1000)
    assert (pool.opened, pool.hits, len(pool)) == (1, 1, 1)
    assert first
    assert second
    assert first != second
    pool.forget()
    assert read_pt(path, 500, 1000) == second  # the same events, opened afresh
    assert (pool.opened, pool.hits) == (2, 1)


def test_threads_never_share_a_handle(demo_catalog: Path, pool: OpenFiles) -> None:
    path = part(demo_catalog, 1)
    f1, key1 = pool.lend(path)
    f2, key2 = pool.lend(path)  # the first is lent: another is opened
    assert f1 is not f2
    assert key1 == key2
    assert pool.opened == 2
    tree = f1["Events"]
    pool.give_back(key1, f1, tree)
    pool.give_back(key2, f2, tree)
    assert len(pool) == 2
    f3, _ = pool.lend(path)
    assert f3 in (f1, f2)
    assert pool.hits == 1


def test_a_new_copy_is_opened_afresh_and_the_old_handle_closed(
    demo_catalog: Path, tmp_path: Path, pool: OpenFiles
) -> None:
    path = str(tmp_path / "copy.root")
    shutil.copyfile(part(demo_catalog, 2), path)
    old = read_pt(path, 0, 100)
    (handle,) = (h for hs in pool._idle.values() for h in hs)
    # The cache evicts the file and fetches another one under the same name.
    staged = tmp_path / "staged.root"
    shutil.copyfile(part(demo_catalog, 3), staged)
    staged.replace(path)
    new = read_pt(path, 0, 100)
    assert new != old  # not the old copy's events through the kept handle
    assert pool.opened == 2
    assert pool.hits == 0
    assert handle.closed
    assert len(pool) == 1  # the deleted copy's disk space is let go


def test_the_pool_keeps_within_its_files_and_branches(
    demo_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [part(demo_catalog, i) for i in range(4)]
    for limits in ({"files": 2}, {"branches": 0}):
        pool = OpenFiles(**limits)
        monkeypatch.setattr(events_module, "OPEN", pool)
        for p in paths:
            read_pt(p, 0, 10)
        handles = [h for hs in pool._idle.values() for h in hs]
        if "files" in limits:
            assert [k[0] for k in pool._idle] == paths[2:]  # the least recently used left
        else:
            assert handles == []  # no branches allowed: nothing kept
        assert all(not h.closed for h in handles)
        assert pool.opened == 4


def test_a_file_that_broke_a_packet_is_not_kept(demo_catalog: Path, pool: OpenFiles) -> None:
    path = part(demo_catalog, 4)
    with (
        pytest.raises(RuntimeError, match="the user's bug"),
        open_events(path, path, "Events", ReadSpec(), 0, 10),
    ):
        raise RuntimeError("the user's bug")
    assert len(pool) == 0
    read_pt(path, 0, 10)
    pool.forget(path)
    assert len(pool) == 0


def test_packets_of_a_cached_file_open_it_once(
    demo_catalog: Path, tmp_path: Path, pool: OpenFiles
) -> None:
    worker = fake_worker(tmp_path / "caches")
    url = part(demo_catalog, 5)
    shipped = ship(DimuonMass(), "demo")
    n = 0
    for a in range(0, 2000, 500):
        spec = PacketSpec(a, 0, url, "Events", a, a + 500, Path(url).stat().st_size, shipped)
        n += packet_on(worker, spec).accumulator["n_events"]
    assert n == 2000
    assert (pool.opened, pool.hits) == (1, 3)


def test_the_calibration_times_a_warm_packet_and_the_open_apart(
    demo_catalog: Path, tmp_path: Path, pool: OpenFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = fake_worker(tmp_path / "caches")
    monkeypatch.setattr(calibrate_module, "get_worker", lambda: worker)
    url = part(demo_catalog, 0)
    spec = PacketSpec(
        -1, -1, url, "Events", 0, 1000, Path(url).stat().st_size, ship(DimuonMass(), "demo")
    )
    result = calibrate_packet(spec, repeats=2)
    assert result.n_events == 1000
    assert result.cpu_s_per_event > 0
    assert result.open_cpu_s >= 0
    # Untimed once, then per repeat a warm run and a cold one (opened afresh).
    assert (pool.opened, pool.hits) == (3, 2)


def test_only_a_copy_new_to_the_node_pays_for_opening_it() -> None:
    base = CostModel(cpu_s_per_event=1e-3, disk_bytes_per_s=1e6, pipelining=Pipelining.NONE)
    fresh = CostModel(
        cpu_s_per_event=1e-3,
        disk_bytes_per_s=1e6,
        pipelining=Pipelining.NONE,
        fresh_cpu_s_per_event=4e-4,
    )
    io: Any = 1e-4
    assert fresh.s_per_event(Source.CACHE, io) == base.s_per_event(Source.CACHE, io)
    for source in (Source.PEER, Source.TERTIARY):
        assert fresh.s_per_event(source, io) == pytest.approx(base.s_per_event(source, io) + 4e-4)
    with pytest.raises(ModelError, match="fresh_cpu_s_per_event: must not be negative"):
        CostModel(fresh_cpu_s_per_event=-1.0)


def test_kept_files_share_one_bounded_array_cache(demo_catalog: Path) -> None:
    pool = OpenFiles(array_bytes=10**6)
    handles = []
    for i in range(3):
        f, key = pool.lend(part(demo_catalog, i))
        f["Events"]["Muon_pt"].array()
        handles.append(f)
        pool.give_back(key, f, f["Events"])
    assert all(h.file.array_cache is pool.arrays for h in handles)  # not 100 MB each
    assert 0 < pool.arrays.current <= 10**6
