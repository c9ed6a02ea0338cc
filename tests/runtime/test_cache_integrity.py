"""A worker's cache under disk faults (docs/runtime.md, "Faults"), without a cluster.

A cached copy that is corrupted (a byte flipped in the middle, truncated, garbage of the same
size, another valid ROOT file put in its place, bit rot found after a restart) is detected by
its size and adler32, dropped, fetched again and never processed; one from a peer is checked
on both sides. A full cache disk (a real tmpfs where we may mount one) leaves no partial file,
the worker reads on without caching, and what the cache dropped unasked reaches the master.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from datasched.runtime import diskcache as diskcache_module
from datasched.runtime import peers as peers_module
from datasched.runtime import worker as worker_module
from datasched.runtime.cachefaults import CacheFaults
from datasched.runtime.demodata import DimuonMass
from datasched.runtime.diskcache import DiskCache, cache_file_name, file_adler32
from datasched.runtime.peers import CorruptCopy, PeerServer, peer_copy
from datasched.runtime.processor import ship
from datasched.runtime.storage import LocalDiskFull, StorageError, copy_file
from datasched.runtime.worker import PacketSpec, cache_plugin, packet_on
from runtime_support import fake_worker, small_disk


def counting(url: str, log: list[str]) -> Callable[[Path], int]:
    def fetch(dest: Path) -> int:
        log.append(url)
        return copy_file(url, dest)

    return fetch


def flip_middle_byte(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))


def attack(kind: str, path: Path, other: Path) -> None:
    """Damage the cached copy at ``path`` as a bad disk or an attacker would."""
    st = path.stat()
    if kind == "flip":
        flip_middle_byte(path)
    elif kind == "flip-keep-mtime":  # the modification time set back: only ctime tells
        flip_middle_byte(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif kind == "truncate":
        with path.open("r+b") as fh:
            fh.truncate(st.st_size // 2)
    elif kind == "garbage":  # same size, other bytes
        path.write_bytes(os.urandom(st.st_size))
    elif kind == "other-root-file":  # a valid ROOT file of the same tree, put in its place
        tmp = path.with_name("replacement")
        shutil.copy(other, tmp)
        tmp.replace(path)
    else:
        raise AssertionError(kind)


ATTACKS = ["flip", "flip-keep-mtime", "truncate", "garbage", "other-root-file"]


@pytest.mark.parametrize("kind", ATTACKS)
def test_a_damaged_copy_is_dropped_and_fetched_again(
    kind: str, demo_catalog: Path, tmp_path: Path
) -> None:
    url = str(demo_catalog.parent / "part-000.root")
    other = demo_catalog.parent / "part-001.root"
    size = Path(url).stat().st_size
    cache = DiskCache(tmp_path / "cache", 10**9)
    log: list[str] = []
    cache.release(cache.acquire(url, size, counting(url, log)))
    cache.release(cache.acquire(url, size, counting(url, log)))  # a hit: no fetch, no read
    assert log == [url]
    attack(kind, cache.path_of(url), other)
    got = cache.acquire(url, size, counting(url, log))
    assert not got.hit
    assert log == [url, url]  # fetched again
    assert got.path.read_bytes() == Path(url).read_bytes()
    assert cache.take_news() == ([], [url])  # reported as corrupted, cached again
    cache.release(got)
    again = cache.acquire(url, size, counting(url, log))
    assert again.hit
    assert log == [url, url]
    assert [p.name for p in cache.root.iterdir() if p.name != "index.json"] == [got.path.name]


def test_bit_rot_is_found_by_the_first_use_after_a_restart(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """The copy rots without anyone writing to it (simulated: its bytes changed, its times
    set back); a restarted worker checks each copy's adler32 before its first use."""
    url = str(demo_catalog.parent / "part-002.root")
    size = Path(url).stat().st_size
    root = tmp_path / "cache"
    log: list[str] = []
    first = DiskCache(root, 10**9)
    first.release(first.acquire(url, size, counting(url, log)))
    recorded = json.loads((root / "index.json").read_text())["files"][0]
    assert recorded["adler32"] == file_adler32(Path(url))
    # An intact copy passes after a restart, without a fetch.
    sound = DiskCache(root, 10**9)
    sound.release(sound.acquire(url, size, counting(url, log)))
    assert log == [url]
    attack("flip-keep-mtime", sound.path_of(url), Path(url))
    rotten = DiskCache(root, 10**9)
    assert rotten.contents() == [url]  # the size is right: found only by the checksum
    got = rotten.acquire(url, size, counting(url, log))
    assert log == [url, url]
    assert got.path.read_bytes() == Path(url).read_bytes()
    assert rotten.take_news() == ([], [url])


def test_an_index_without_checksums_is_not_trusted(demo_catalog: Path, tmp_path: Path) -> None:
    url = str(demo_catalog.parent / "part-003.root")
    root = tmp_path / "cache"
    root.mkdir()
    shutil.copy(url, root / cache_file_name(url))
    doc = {"version": 1, "files": [{"url": url, "bytes": Path(url).stat().st_size}]}
    (root / "index.json").write_text(json.dumps(doc))
    cache = DiskCache(root, 10**9)
    assert cache.contents() == []
    assert not (root / cache_file_name(url)).exists()


def test_a_copy_changed_while_a_packet_reads_it_is_not_used(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written to while the processor runs: the packet fails as a transient error (the
    master sends it again, its result unused), and the next packet fetches a sound copy."""
    worker = fake_worker(tmp_path / "caches")
    _, plugin = cache_plugin(worker)
    assert plugin.cache is not None
    url = str(demo_catalog.parent / "part-004.root")
    size = Path(url).stat().st_size
    spec = PacketSpec(1, 0, url, "Events", 0, 500, size, ship(DimuonMass(), "demo"))
    clean = packet_on(worker, spec)
    process = worker_module.process_events

    def damaging(spec: PacketSpec, path: str, repeats: int = 1) -> Any:
        out = process(spec, path, repeats)
        flip_middle_byte(Path(path))
        return out

    monkeypatch.setattr(worker_module, "process_events", damaging)
    with pytest.raises(StorageError, match="changed while it was read") as caught:
        packet_on(worker, spec)
    assert caught.value.transient
    monkeypatch.setattr(worker_module, "process_events", process)
    again = packet_on(worker, spec)
    assert again.source == "tertiary"
    assert again.cache_corrupted == [url]
    assert list(again.accumulator["mass"].values()) == list(clean.accumulator["mass"].values())


@pytest.mark.parametrize("kind", ["other-root-file", "garbage"])
def test_a_packet_never_processes_a_damaged_copy(
    kind: str, demo_catalog: Path, tmp_path: Path
) -> None:
    """Another valid ROOT file in its place would be read without error: its events must
    not be counted. The packet's result is that of the true file, and says what it found."""
    worker = fake_worker(tmp_path / "caches")
    _, plugin = cache_plugin(worker)
    assert plugin.cache is not None
    url = str(demo_catalog.parent / "part-000.root")
    other = demo_catalog.parent / "part-001.root"
    size = Path(url).stat().st_size
    spec = PacketSpec(1, 0, url, "Events", 0, 1000, size, ship(DimuonMass(), "demo"))
    clean = packet_on(worker, spec)
    assert clean.cache_added == [url]
    attack(kind, plugin.cache.path_of(url), other)
    result = packet_on(worker, spec)
    assert result.source == "tertiary"
    assert result.cache_corrupted == [url]
    assert result.cache_added == [url]
    assert result.accumulator["n_events"] == 1000
    assert list(result.accumulator["mass"].values()) == list(clean.accumulator["mass"].values())
    assert packet_on(worker, spec).source == "cache"


def serve_directly(monkeypatch: pytest.MonkeyPatch, server: PeerServer) -> None:
    """Peer calls go straight to ``server``'s handler (no Dask comms)."""
    import asyncio

    def call(worker: Any, address: str, **kwargs: Any) -> Any:
        return asyncio.run(server.serve(**kwargs))

    monkeypatch.setattr(peers_module, "_call", call)


def test_a_peer_does_not_serve_its_damaged_copy(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(demo_catalog.parent / "part-005.root")
    size = Path(url).stat().st_size
    theirs = DiskCache(tmp_path / "peer", 10**9)
    theirs.release(theirs.acquire(url, size, counting(url, [])))
    attack("garbage", theirs.path_of(url), Path(url))
    serve_directly(monkeypatch, PeerServer(theirs))
    dest = tmp_path / "copy"
    with pytest.raises(StorageError, match="has 0 of"):
        peer_copy(None, "tcp://peer:1", url, dest, size)
    assert not dest.exists()
    assert theirs.contents() == []  # the peer dropped it
    assert theirs.take_news() == ([url], [url])


def test_a_copy_damaged_on_its_way_from_a_peer_is_not_kept(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peer's copy is sound but a block arrives changed: the reader's adler32 is not the
    one the peer recorded, so the copy is dropped and the file read from tertiary storage."""
    url = str(demo_catalog.parent / "part-005.root")
    size = Path(url).stat().st_size
    theirs = DiskCache(tmp_path / "peer", 10**9)
    theirs.release(theirs.acquire(url, size, counting(url, [])))
    server = PeerServer(theirs)
    read = server._read

    def damaged(url: str, offset: int, size: int) -> bytes | None:
        block = read(url, offset, size)
        return None if block is None else bytes([block[0] ^ 1]) + block[1:]

    monkeypatch.setattr(server, "_read", damaged)
    serve_directly(monkeypatch, server)
    dest = tmp_path / "copy"
    with pytest.raises(CorruptCopy, match="adler32"):
        peer_copy(None, "tcp://peer:1", url, dest, size)
    assert not dest.exists()
    # In a packet: the copy is not used, the file comes from tertiary storage.
    monkeypatch.setattr(worker_module, "peer_state", lambda *args: "cached")
    worker = fake_worker(tmp_path / "caches")
    spec = PacketSpec(
        1, 0, url, "Events", 0, 100, size, ship(DimuonMass(), "demo"), peer="tcp://peer:1"
    )
    result = packet_on(worker, spec)
    assert result.source == "tertiary"
    assert result.cache_corrupted == [url]
    assert result.bytes_from_peer == 0


def test_evictions_for_a_fetch_that_failed_reach_the_master(tmp_path: Path) -> None:
    files = []
    for i in range(3):
        f = tmp_path / f"f{i}.root"
        f.write_bytes(bytes([i]) * 400)
        files.append(str(f))
    cache = DiskCache(tmp_path / "cache", 1000)
    for url in files[:2]:
        cache.release(cache.acquire(url, 400, counting(url, [])))

    def broken(dest: Path) -> int:
        dest.write_bytes(b"half")
        raise StorageError(files[2], "read failed", transient=True)

    with pytest.raises(StorageError):
        cache.acquire(files[2], 400, broken)  # evicted files[0] first
    assert cache.contents() == [files[1]]
    assert cache.take_news() == ([files[0]], [])
    assert cache.take_news() == ([], [])
    assert sorted(p.name for p in cache.root.iterdir()) == sorted(
        ["index.json", cache_file_name(files[1])]
    )


def test_no_room_for_the_index_is_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy fitted but the index did not: the copy (which a restart would not keep) is
    dropped, the fetch counts as a full disk, and a reader waiting for it is not left hanging."""
    src = tmp_path / "f.root"
    src.write_bytes(b"x" * 500)
    cache = DiskCache(tmp_path / "cache", 10**9)
    started, go = threading.Event(), threading.Event()

    def slow(dest: Path) -> int:
        started.set()
        go.wait(5)
        return copy_file(str(src), dest)

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(diskcache_module, "atomic_write_text", no_space)
    outcomes: list[str] = []

    def reader() -> None:
        try:
            cache.acquire(str(src), 500, slow)
            outcomes.append("acquired")
        except LocalDiskFull:
            outcomes.append("full")

    first = threading.Thread(target=reader)
    first.start()
    started.wait(5)
    second = threading.Thread(target=reader)
    second.start()
    go.set()
    first.join(5)
    second.join(5)
    assert outcomes == ["full", "full"]
    assert cache.contents() == []
    assert "space" in cache.disk_full
    assert leftovers(cache.root) == []  # no copy, no .part


def test_cache_faults_are_notes_and_counts() -> None:
    faults = CacheFaults()
    for url in ("a.root", "a.root", "b.root"):
        faults.packet("n1", url, "direct", [])
    faults.packet("n2", "c.root", "tertiary", ["c.root"])
    faults.copies("n2", ["d.root"])
    assert faults.notes() == [
        "node n1: 3 packets of 2 files read from storage without caching (its cache disk was full)",
        "node n2: 2 cached copies failed their size or adler32 check: dropped, fetched "
        "again, not processed: c.root, d.root",
    ]
    assert faults.as_dict() == {
        "read_through": {"n1": {"packets": 3, "files": 2}},
        "corrupted": {"n2": {"c.root": 1, "d.root": 1}},
    }


# -- a real full disk: a tmpfs (root) ------------------------------------------------------


def demo_packets(catalog: Path, names: list[str]) -> list[PacketSpec]:
    shipped = ship(DimuonMass(), "demo")
    specs = []
    for i, name in enumerate(names):
        url = str(catalog.parent / name)
        size = Path(url).stat().st_size
        specs.append(PacketSpec(i, 0, url, "Events", 0, 2000, size, shipped))
    return specs


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "index.json")


def test_a_cache_disk_smaller_than_a_file_reads_everything_through(
    demo_catalog: Path, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "caches", "32k"):
        worker = fake_worker(tmp_path / "caches")
        specs = demo_packets(demo_catalog, ["part-000.root", "part-001.root", "part-000.root"])
        results = [packet_on(worker, spec) for spec in specs]
        assert [r.source for r in results] == ["direct"] * 3
        assert [r.accumulator["n_events"] for r in results] == [2000] * 3
        assert results[0].accumulator["mass"] == results[2].accumulator["mass"]
        assert "the cache disk is full" in results[0].note
        assert [r.note for r in results[1:]] == ["", ""]
        assert not any(r.cache_added for r in results)
        assert leftovers(tmp_path / "caches" / "n1") == []
        assert leftovers(tmp_path / "caches" / "n1.staging") == []


def test_a_write_that_finds_the_disk_full_leaves_nothing_behind(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The free space looked enough (another writer took it meanwhile, or a quota): the
    write itself fails with ENOSPC mid-file. The partial copy is removed and the packet
    reads the file where it is."""
    monkeypatch.setattr(DiskCache, "_free_bytes", lambda self: 1 << 40)
    with small_disk(tmp_path / "caches", "100k"):
        worker = fake_worker(tmp_path / "caches")
        first, second = (
            packet_on(worker, s)
            for s in demo_packets(demo_catalog, ["part-000.root", "part-001.root"])
        )
        assert first.source == "tertiary"
        assert first.cache_added == [first_url := str(demo_catalog.parent / "part-000.root")]
        assert second.source == "direct"
        assert second.accumulator["n_events"] == 2000
        assert "No space left on device" in second.note
        assert leftovers(tmp_path / "caches" / "n1") == [cache_file_name(first_url)]
        _, plugin = cache_plugin(worker)
        assert plugin.cache is not None
        assert plugin.cache.contents() == [first_url]


def test_a_small_cache_disk_keeps_caching_by_evicting(demo_catalog: Path, tmp_path: Path) -> None:
    """A disk with room for two files, under a capacity of a gigabyte: the cache evicts to
    fit the disk instead of failing, and tells the master what it evicted."""
    with small_disk(tmp_path / "caches", "160k"):
        worker = fake_worker(tmp_path / "caches")
        names = ["part-000.root", "part-001.root", "part-002.root", "part-003.root"]
        results = [packet_on(worker, s) for s in demo_packets(demo_catalog, names)]
        assert [r.source for r in results] == ["tertiary"] * 4
        held: set[str] = set()
        for r in results:
            held = (held | set(r.cache_added)) - set(r.cache_evicted)
        _, plugin = cache_plugin(worker)
        assert plugin.cache is not None
        assert held == set(plugin.cache.contents())
        assert 1 <= len(held) <= 2
        assert len(leftovers(tmp_path / "caches" / "n1")) == len(held)


# -- a whole run (slow: two runs on a LocalCluster) ---------------------------------------


@pytest.mark.slow
def test_a_run_reads_through_a_full_cache_disk_and_never_processes_a_damaged_copy(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """Worker 0's cache is a tmpfs smaller than a file: it reads every file where it is,
    and the summary says so. Then worker 1's cached copies are damaged between runs: the next
    run drops and fetches them again, and the summary counts them. Both runs count every
    event once, with the histogram computed directly."""
    import asyncio

    import yaml

    from datasched.runtime.jobspec import load_jobs
    from datasched.runtime.reports import EngineConfig, RunReport
    from datasched.runtime.session import ClusterOptions, default_calibration, run_jobs
    from runtime_support import N_EVENTS, reference_counts

    doc = {
        "catalog": str(demo_catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
        "jobs": [
            {"id": "a", "dataset": "zmumu", "events": [0, 8000], "output": str(tmp_path / "a.pkl")},
            {
                "id": "b",
                "dataset": "zmumu",
                "events": [4000, N_EVENTS],
                "output": str(tmp_path / "b.pkl"),
            },
        ],
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    specs = load_jobs(tmp_path / "jobs.yaml")
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=tmp_path / "caches")
    kw: dict[str, Any] = {
        "policy": "cache-splitting",
        "config": EngineConfig(queue_s=0.2, poll_s=0.1),
        "calibration": default_calibration(None, 1e-5),
    }

    def exactly_once(report: RunReport) -> None:
        for spec, job in zip(specs, report.jobs, strict=True):
            assert job.status == "completed", job.error
            assert job.events_processed == job.events_expected == spec.stop - spec.start
            counts = [float(x) for x in report.results[spec.id]["mass"].values()]
            assert counts == reference_counts(demo_catalog, spec.start, spec.stop)

    with small_disk(tmp_path / "caches" / "0", "32k"):
        full = asyncio.run(run_jobs(specs, opts, **kw))
        assert leftovers(tmp_path / "caches" / "0") == []
    exactly_once(full)
    on_full = [p for p in full.packets if p.node == "0"]
    assert on_full
    assert {p.source for p in on_full} == {"direct"}
    assert full.cache_faults["read_through"]["0"]["packets"] == len(on_full)
    assert any(n.startswith("node 0: ") and "without caching" in n for n in full.notes)
    assert "1" not in full.cache_faults["read_through"]

    damaged = sorted((tmp_path / "caches" / "1").glob("*.root"))
    assert damaged
    for path in damaged:
        flip_middle_byte(path)
    again = asyncio.run(run_jobs(specs, opts, **kw))
    exactly_once(again)
    found = again.cache_faults["corrupted"].get("1", {})
    assert found
    assert {cache_file_name(url) for url in found} <= {p.name for p in damaged}
    assert any(n.startswith("node 1: ") and "adler32" in n for n in again.notes)
