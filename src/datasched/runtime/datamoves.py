"""Data moved on the core's request, on a worker: Fetch and Replicate bring whole files into
the node's cache (from tertiary storage, or from a peer's cache), Pin and Unpin keep files
from eviction, Evict drops them. Each is a Dask task pinned to the node's worker, like a
packet; the master turns its result into the core's answer (FetchDone, TransferDone,
CacheChanged).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distributed import get_worker

from datasched.runtime.storage import LocalDiskFull, StorageError
from datasched.runtime.worker import cache_plugin, fetcher

__all__ = ["FileToMove", "MoveResult", "evict_files", "move_files", "pin_files", "unpin_files"]


@dataclass(frozen=True, slots=True)
class FileToMove:
    """A file to bring into the cache: its URL, size, and the Dask address of a peer whose
    cache it is copied from (over Dask's comms)."""

    url: str
    n_bytes: int
    peer: str | None = None


@dataclass(slots=True)
class MoveResult:
    """What a move did on the worker."""

    node: str
    cached: list[str] = field(default_factory=list)
    """The files asked for that are now in the cache."""
    added: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    bytes_moved: int = 0
    failed: list[str] = field(default_factory=list)
    corrupted: list[str] = field(default_factory=list)
    """Files whose copy here (or arriving from a peer) failed its size or adler32 check."""


def move_files(files: list[FileToMove]) -> MoveResult:
    """Bring ``files`` into this worker's cache (the task of a Fetch or a Replicate)."""
    worker = get_worker()
    node, plugin = cache_plugin(worker)
    cache = plugin.cache
    assert cache is not None
    result = MoveResult(node)
    for f in files:
        fetch, info = fetcher(plugin, f.url, f.n_bytes, f.peer, worker)
        try:
            got = cache.acquire(f.url, f.n_bytes, fetch)
        except (StorageError, LocalDiskFull):
            result.failed.append(f.url)
            result.corrupted += info["corrupted"]
            continue
        cache.release(got)
        result.added += got.added
        result.evicted += got.evicted
        result.bytes_moved += got.bytes_fetched
        result.corrupted += info["corrupted"]
        if got.cached:
            result.cached.append(f.url)
    # What the cache dropped unasked (evictions for fetches that failed, corrupted copies):
    # the master's directory must not go on believing them here.
    dropped, corrupted = cache.take_news()
    result.evicted += dropped
    result.corrupted += corrupted
    return result


def pin_files(token: int, urls: list[str]) -> list[str]:
    """Pin the cached ones of ``urls`` under ``token``; returns those pinned."""
    _, plugin = cache_plugin()
    assert plugin.cache is not None
    pinned = [url for url in urls if plugin.cache.pin(url)]
    plugin.pins[token] = pinned
    return pinned


def unpin_files(token: int) -> None:
    _, plugin = cache_plugin()
    assert plugin.cache is not None
    for url in plugin.pins.pop(token, []):
        plugin.cache.unpin(url)


def evict_files(urls: list[str]) -> list[str]:
    """Drop the unpinned ones of ``urls`` from this worker's cache; returns those dropped."""
    _, plugin = cache_plugin()
    assert plugin.cache is not None
    return [url for url in urls if plugin.cache.discard(url)]
