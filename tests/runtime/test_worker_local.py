"""A worker's side of a packet, tested without a cluster: a full cache disk reads on without
caching (and says so once), a cache directory that cannot be created is one clear error, and
a file a peer has only announced is fetched and kept here; a cached file is read from the
cache even by packets that may not fill it, but not by those of a policy without caches."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from datasched.runtime import worker as worker_module
from datasched.runtime.demodata import DimuonMass
from datasched.runtime.processor import ship
from datasched.runtime.storage import LocalDiskFull, copy_file
from datasched.runtime.worker import (
    CacheDirError,
    PacketSpec,
    packet_on,
)
from runtime_support import fake_worker


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_not_a_storage_error(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 10_000)
    full = tmp_path / "dest"
    full.symlink_to("/dev/full")  # every write there fails with ENOSPC
    with pytest.raises(LocalDiskFull):
        copy_file(str(src), full, retries=3, backoff_s=10.0)  # at once: no retry, no wait
    assert not full.exists()
    assert Path("/dev/full").exists()  # the link went, not the device


def test_a_full_cache_disk_reads_on_without_caching_and_says_so_once(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: Any, **kwargs: Any) -> int:
        raise LocalDiskFull(28, "No space left on device")

    monkeypatch.setattr(worker_module, "copy_file", disk_full)
    worker = fake_worker(tmp_path / "caches")
    url = str(demo_catalog.parent / "part-000.root")
    shipped = ship(DimuonMass(), "demo")
    results = []
    for a, b in ((0, 500), (500, 1000)):
        spec = PacketSpec(1, 0, url, "Events", a, b, Path(url).stat().st_size, shipped)
        results.append(packet_on(worker, spec))
    assert [r.source for r in results] == ["direct", "direct"]
    assert [r.n_events for r in results] == [500, 500]
    assert results[0].accumulator["n_events"] == 500
    assert not results[0].cache_added
    assert "the cache disk is full" in results[0].note
    assert results[1].note == ""


def test_a_cache_directory_that_cannot_be_created_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(CacheDirError, match=r"worker n1: cannot create the cache directory"):
        fake_worker(blocker / "caches")


def test_a_file_the_peer_only_announced_is_fetched_and_kept_here(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master said a peer holds the file, but the peer's fetch has not begun: this node
    fetches it from tertiary storage and caches it (the master learns of it, and the peer
    then reads it from here), rather than staging a copy the peer will fetch again."""
    asked: list[str] = []

    def absent(worker: Any, address: str, url: str) -> str:
        asked.append(address)
        return "absent"

    monkeypatch.setattr(worker_module, "peer_state", absent)
    worker = fake_worker(tmp_path / "caches")
    url = str(demo_catalog.parent / "part-001.root")
    shipped = ship(DimuonMass(), "demo")
    spec = PacketSpec(
        1, 0, url, "Events", 0, 100, Path(url).stat().st_size, shipped, peer="tcp://p:1"
    )
    first = packet_on(worker, spec)
    assert asked == ["tcp://p:1"]
    assert first.source == "tertiary"
    assert first.cache_added == [url]
    # Cached here now: the next packet reads its own copy without asking the peer.
    second = packet_on(worker, spec)
    assert second.source == "cache"
    assert asked == ["tcp://p:1"]


def test_a_packet_that_may_not_fill_the_cache_still_reads_the_cached_copy(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """A pull policy's packet (``cache_fill`` off) on the node that holds its file reads it
    from the node's cache, not from the file's original place."""
    worker = fake_worker(tmp_path / "caches")
    url = str(demo_catalog.parent / "part-002.root")
    shipped = ship(DimuonMass(), "demo")
    size = Path(url).stat().st_size
    filling = PacketSpec(1, 0, url, "Events", 0, 100, size, shipped)
    assert packet_on(worker, filling).cache_added == [url]  # now cached here
    reading = PacketSpec(2, 0, url, "Events", 100, 200, size, shipped, cache_fill=False)
    result = packet_on(worker, reading)
    assert result.source == "cache"
    assert result.bytes_from_tertiary == 0
    # Not cached anywhere: such a packet reads the original without keeping a copy.
    other = str(demo_catalog.parent / "part-003.root")
    spec = PacketSpec(
        3, 0, other, "Events", 0, 100, Path(other).stat().st_size, shipped, cache_fill=False
    )
    result = packet_on(worker, spec)
    assert result.source == "tertiary"
    assert not result.cache_added


def test_a_packet_of_a_policy_without_caches_ignores_a_cached_copy(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """The processing farm's packets (``use_cache`` off) read tertiary storage even where
    the calibration or an earlier run left a copy in the node's cache, and keep nothing."""
    worker = fake_worker(tmp_path / "caches")
    url = str(demo_catalog.parent / "part-002.root")
    shipped = ship(DimuonMass(), "demo")
    size = Path(url).stat().st_size
    assert packet_on(worker, PacketSpec(1, 0, url, "Events", 0, 100, size, shipped)).cache_added
    farm = PacketSpec(
        2, 0, url, "Events", 100, 200, size, shipped, cache_fill=False, use_cache=False
    )
    result = packet_on(worker, farm)
    assert result.source == "tertiary"
    assert result.bytes_from_tertiary > 0
    assert not result.cache_added


@pytest.mark.parametrize(
    ("address", "began_s_ago", "waits"),
    [
        ("tcp://9.9.9.9:9", 5.0, True),  # began first: waited for, whatever its address
        ("tcp://0.0.0.0:1", -5.0, False),  # began after us: we go on, though its address is lower
    ],
)
def test_a_peers_fetch_is_waited_for_when_it_began_first(
    demo_catalog: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    address: str,
    began_s_ago: float,
    waits: bool,
) -> None:
    """Two workers fetching one file see each other: the one whose fetch began first goes
    on, the other copies the file from it (one tertiary read for the two)."""
    import time

    copied: list[str] = []

    def status(worker: Any, peer: str, url: str) -> tuple[str, float | None]:
        return "fetching", time.time() - began_s_ago

    def copy(worker: Any, peer: str, url: str, dest: Path, n: int, **kw: Any) -> int:
        copied.append(peer)
        return copy_file(url, dest)

    monkeypatch.setattr(worker_module, "peer_status", status)
    monkeypatch.setattr(worker_module, "peer_state", lambda *args: "cached")  # once it is done
    monkeypatch.setattr(worker_module, "peer_copy", copy)
    worker = fake_worker(tmp_path / "caches")
    worker.address = "tcp://5.5.5.5:5"
    url = str(demo_catalog.parent / "part-004.root")
    spec = PacketSpec(
        1,
        0,
        url,
        "Events",
        0,
        100,
        Path(url).stat().st_size,
        ship(DimuonMass(), "demo"),
        peers=(address,),
    )
    result = packet_on(worker, spec)
    assert result.source == ("peer" if waits else "tertiary")
    assert copied == ([address] if waits else [])
    assert result.cache_added == [url]  # cached here either way


def test_a_packet_gets_its_slot_after_the_packet_before_it_leaves_it(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """A packet's task starts on the worker at once (``started``), but computes only once
    the slot's CPU is free: ``slot_at`` is that moment, so that the service measures a
    file's run without the wait behind other jobs' packets (docs/service-whatif.md)."""
    import threading
    import time

    from datasched.runtime.worker import cache_plugin

    worker = fake_worker(tmp_path / "caches")
    _, plugin = cache_plugin(worker)
    assert plugin.compute is not None
    url = str(demo_catalog.parent / "part-004.root")
    spec = PacketSpec(
        1, 0, url, "Events", 0, 100, Path(url).stat().st_size, ship(DimuonMass(), "demo")
    )
    got: list[Any] = []
    plugin.compute.acquire()  # another packet computes on the only slot
    thread = threading.Thread(target=lambda: got.append(packet_on(worker, spec)))
    thread.start()
    deadline = time.monotonic() + 60.0
    while not plugin.cache or plugin.cache.state(url) != "cached":  # its file is here
        assert time.monotonic() < deadline
        time.sleep(0.01)
    released = time.time()
    plugin.compute.release()
    thread.join(60.0)
    (result,) = got
    assert result.started < released
    assert result.slot_at is not None
    assert released <= result.slot_at <= time.time()


def test_a_gone_peer_is_given_up_on_after_the_peer_connect_bound(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peer calls go through a real Dask server and connection pool: a peer that serves its
    cache answers; once it is gone, the caller counts the file absent there after
    :data:`PEER_CONNECT_S`, not after Dask's connect timeout (set to ten minutes here: an
    unbounded connect would not return before the thread's join gives up)."""
    import threading

    import dask
    from distributed.core import ConnectionPool, Server
    from distributed.utils import LoopRunner, sync

    from datasched.runtime import peers as peers_module
    from datasched.runtime.diskcache import DiskCache

    url = str(demo_catalog.parent / "part-001.root")
    size = Path(url).stat().st_size
    cache = DiskCache(tmp_path / "peer", 10**9)
    cache.release(cache.acquire(url, size, lambda dest: copy_file(url, dest)))
    runner = LoopRunner(asynchronous=False)
    runner.start()  # type: ignore[no-untyped-call]
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "600s"}):

            async def up() -> tuple[Server, ConnectionPool]:
                handlers = {peers_module.PEER_OP: peers_module.PeerServer(cache).serve}
                server = Server(handlers)  # type: ignore[no-untyped-call]
                await server.listen("tcp://127.0.0.1:0")  # type: ignore[no-untyped-call]
                return server, await ConnectionPool()

            server, pool = sync(runner.loop, up)
            worker = SimpleNamespace(loop=runner.loop, rpc=pool)
            address = server.address
            assert peers_module.peer_state(worker, address, url) == "cached"
            dest = tmp_path / "copy"
            assert peers_module.peer_copy(worker, address, url, dest, size) == size
            assert dest.read_bytes() == Path(url).read_bytes()
            sync(runner.loop, server.close)
            monkeypatch.setattr(peers_module, "PEER_CONNECT_S", 0.5)
            answers: list[tuple[str, float | None]] = []
            asking = threading.Thread(
                target=lambda: answers.append(peers_module.peer_status(worker, address, url))
            )
            asking.start()
            asking.join(timeout=120)
            assert answers == [("absent", None)]
            sync(runner.loop, pool.close)
    finally:
        runner.stop()  # type: ignore[no-untyped-call]
