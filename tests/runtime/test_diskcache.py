"""The worker's disk cache and tertiary reads: LRU by bytes, pins, persistence, retries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from datasched.runtime.diskcache import DiskCache, cache_file_name
from datasched.runtime.storage import StorageError, Throttle, copy_file


def make_file(tmp_path: Path, name: str, n: int) -> str:
    path = tmp_path / "tertiary" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(bytes([len(name)]) * n)
    return str(path)


def fetcher(url: str, log: list[str]) -> Callable[[Path], int]:
    def fetch(dest: Path) -> int:
        log.append(url)
        return copy_file(url, dest)

    return fetch


def test_hit_after_miss_and_lru_eviction_by_bytes(tmp_path: Path) -> None:
    urls = [make_file(tmp_path, f"f{i}.root", 400) for i in range(4)]
    cache = DiskCache(tmp_path / "cache", capacity_bytes=1000)
    log: list[str] = []
    a = cache.acquire(urls[0], 400, fetcher(urls[0], log))
    assert not a.hit
    assert a.cached
    assert a.added == [urls[0]]
    assert a.bytes_fetched == 400
    cache.release(a)
    b = cache.acquire(urls[0], 400, fetcher(urls[0], log))
    assert b.hit
    assert b.bytes_fetched == 0
    assert log == [urls[0]]
    cache.release(b)
    for u in urls[1:3]:
        cache.release(cache.acquire(u, 400, fetcher(u, log)))
    # Two files fit (800 <= 1000); the third evicted the least recently used, f0.
    assert cache.contents() == [urls[1], urls[2]]
    assert cache.used_bytes == 800 <= cache.capacity_bytes
    assert not cache.path_of(urls[0]).exists()


def test_pinned_files_are_never_evicted(tmp_path: Path) -> None:
    urls = [make_file(tmp_path, f"g{i}.root", 600) for i in range(2)]
    cache = DiskCache(tmp_path / "cache", capacity_bytes=1000)
    held = cache.acquire(urls[0], 600, fetcher(urls[0], []))
    other = cache.acquire(urls[1], 600, fetcher(urls[1], []))
    # No room without evicting the pinned file: read through a temporary copy instead.
    assert not other.cached
    assert other.path.exists()
    assert cache.contents() == [urls[0]]
    cache.release(other)
    assert not other.path.exists()
    cache.release(held)
    again = cache.acquire(urls[1], 600, fetcher(urls[1], []))
    assert again.cached
    assert again.evicted == [urls[0]]


def test_cache_survives_a_restart_and_drops_strays(tmp_path: Path) -> None:
    url = make_file(tmp_path, "h.root", 300)
    root = tmp_path / "cache"
    cache = DiskCache(root, capacity_bytes=1000)
    cache.release(cache.acquire(url, 300, fetcher(url, [])))
    (root / "junk.part").write_bytes(b"half")
    again = DiskCache(root, capacity_bytes=1000)
    assert again.contents() == [url]
    assert not (root / "junk.part").exists()
    # A truncated copy is not trusted.
    again.path_of(url).write_bytes(b"short")
    assert DiskCache(root, capacity_bytes=1000).contents() == []


def test_second_reader_waits_for_the_fetch_in_flight(tmp_path: Path) -> None:
    url = make_file(tmp_path, "w.root", 100)
    cache = DiskCache(tmp_path / "cache", capacity_bytes=1000)
    started, go = threading.Event(), threading.Event()
    log: list[str] = []

    def slow(dest: Path) -> int:
        log.append("fetch")
        started.set()
        go.wait(5)
        return copy_file(url, dest)

    results = []
    t = threading.Thread(target=lambda: results.append(cache.acquire(url, 100, slow)))
    t.start()
    started.wait(5)
    u = threading.Thread(target=lambda: results.append(cache.acquire(url, 100, slow)))
    u.start()
    go.set()
    t.join(5)
    u.join(5)
    assert log == ["fetch"]
    assert sorted(r.hit for r in results) == [False, True]


def test_failed_fetch_leaves_nothing(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache", capacity_bytes=1000)
    missing = str(tmp_path / "nope.root")
    with pytest.raises(StorageError, match=r"nope\.root: no such file"):
        cache.acquire(missing, 10, lambda dest: copy_file(missing, dest))
    assert cache.contents() == []
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["index.json"]


def test_transient_errors_are_retried_then_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasched.runtime.storage as storage

    url = make_file(tmp_path, "flaky.root", 50)
    calls: list[int] = []
    real = storage._copy_once

    def flaky(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("connection reset")
        return real(*args, **kwargs)

    monkeypatch.setattr(storage, "_copy_once", flaky)
    dest = tmp_path / "copy"
    assert copy_file(url, dest, retries=3, backoff_s=0.001) == 50
    assert len(calls) == 3
    calls.clear()
    monkeypatch.setattr(storage, "_copy_once", lambda *a, **k: (_ for _ in ()).throw(OSError("io")))
    with pytest.raises(StorageError, match="after 2 attempts") as info:
        copy_file(url, tmp_path / "copy2", retries=1, backoff_s=0.001)
    assert info.value.transient
    assert not (tmp_path / "copy2").exists()


def test_a_closing_worker_stops_retrying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that lost its scheduler closes only when its reads are done: once its stop
    event is set, a failed read is not tried again, and a wait between tries ends at once."""
    import threading
    import time

    import datasched.runtime.storage as storage

    url = make_file(tmp_path, "cut.root", 50)
    calls: list[int] = []
    stop = threading.Event()

    def unreachable(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        raise TimeoutError("stream timed out")

    monkeypatch.setattr(storage, "_copy_once", unreachable)
    # Set while the read waits 60 s before its second try: it gives up at once.
    threading.Timer(0.2, stop.set).start()
    began = time.monotonic()
    with pytest.raises(StorageError, match="the worker is closing: no retry after 2 attempts"):
        copy_file(url, tmp_path / "a", retries=5, backoff_s=60.0, stop=stop)
    assert time.monotonic() - began < 30
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StorageError, match="no retry after 1 attempts") as info:
        copy_file(url, tmp_path / "b", retries=5, backoff_s=60.0, stop=stop)
    assert info.value.transient  # the master sends the packet elsewhere
    assert calls == [1]
    assert not (tmp_path / "b").exists()


def test_wrong_size_is_an_error(tmp_path: Path) -> None:
    url = make_file(tmp_path, "sz.root", 10)
    with pytest.raises(StorageError, match="expected 11 bytes"):
        copy_file(url, tmp_path / "c", expected_bytes=11)


def test_throttle_spaces_reads() -> None:
    slept: list[float] = []
    throttle = Throttle(1000.0, sleep=slept.append)
    for _ in range(3):
        throttle.consume(500)
    # 1,500 bytes at 1,000 B/s (the fake sleep lets no time pass): the last read may go
    # 1.5 s after the first, each 0.5 s after the one before.
    assert slept == pytest.approx([0.5, 1.0, 1.5], abs=0.05)
    Throttle(None, sleep=slept.append).consume(10**9)  # no limit: it never waits
    assert len(slept) == 3
    with pytest.raises(ValueError, match="tertiary_bytes_per_s"):
        Throttle(0)


def test_cache_names_are_distinct_and_safe() -> None:
    a = cache_file_name("root://host//store/a/f.root")
    b = cache_file_name("root://host//store/b/f.root")
    assert a != b
    assert "/" not in a
    assert a.endswith("f.root")


def test_the_status_says_when_a_fetch_under_way_began(tmp_path: Path) -> None:
    import time

    url = make_file(tmp_path, "f.root", 100)
    cache = DiskCache(tmp_path / "cache", 1000)
    seen: list[tuple[str, float | None]] = []

    def fetch(dest: Path) -> int:
        seen.append(cache.status(url))  # peers asking while it is fetched
        return copy_file(url, dest)

    assert cache.status(url) == ("absent", None)
    before = time.time()
    cache.release(cache.acquire(url, 100, fetch))
    ((state, began),) = seen
    assert state == "fetching"
    assert began is not None
    assert before <= began <= time.time()
    assert cache.status(url) == ("cached", None)
