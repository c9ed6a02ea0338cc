"""Data moved on the core's request, on a worker: Fetch and Replicate bring whole files into
the node's cache (from tertiary storage, or from a peer's cache), Pin and Release keep files
from eviction, Evict drops them. Each is a Dask task pinned to the node's worker, like a
packet; the master turns its result into the core's answer (FetchDone, TransferDone,
CacheChanged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datasched.runtime.diskcache import cache_file_name
from datasched.runtime.storage import StorageError, copy_file
from datasched.runtime.worker import _plugin

__all__ = ["FileToMove", "MoveResult", "evict_files", "move_files", "pin_files", "unpin_files"]


@dataclass(frozen=True, slots=True)
class FileToMove:
    """A file to bring into the cache: its URL, size, and a peer's cache to copy it from."""

    url: str
    n_bytes: int
    peer_root: str | None = None


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


def move_files(files: list[FileToMove]) -> MoveResult:
    """Bring ``files`` into this worker's cache (the task of a Fetch or a Replicate)."""
    node, plugin = _plugin()
    cache = plugin.cache
    assert cache is not None
    result = MoveResult(node)
    for f in files:

        def fetch(dest: Path, f: FileToMove = f) -> int:
            if f.peer_root is not None:
                try:
                    peer = str(Path(f.peer_root) / cache_file_name(f.url))
                    return copy_file(peer, dest, retries=0, expected_bytes=f.n_bytes)
                except StorageError:
                    pass  # evicted on the peer meanwhile: from tertiary storage
            return copy_file(
                f.url,
                dest,
                throttle=plugin.throttle,
                retries=plugin.retries,
                backoff_s=plugin.backoff_s,
                expected_bytes=f.n_bytes,
            )

        try:
            got = cache.acquire(f.url, f.n_bytes, fetch)
        except StorageError:
            result.failed.append(f.url)
            continue
        cache.release(got)
        result.added += got.added
        result.evicted += got.evicted
        result.bytes_moved += got.bytes_fetched
        if got.cached:
            result.cached.append(f.url)
    return result


def pin_files(token: int, urls: list[str]) -> list[str]:
    """Pin the cached ones of ``urls`` under ``token``; returns those pinned."""
    _, plugin = _plugin()
    assert plugin.cache is not None
    pinned = [url for url in urls if plugin.cache.pin(url)]
    plugin.pins[token] = pinned
    return pinned


def unpin_files(token: int) -> None:
    _, plugin = _plugin()
    assert plugin.cache is not None
    for url in plugin.pins.pop(token, []):
        plugin.cache.unpin(url)


def evict_files(urls: list[str]) -> list[str]:
    """Drop the unpinned ones of ``urls`` from this worker's cache; returns those dropped."""
    _, plugin = _plugin()
    assert plugin.cache is not None
    return [url for url in urls if plugin.cache.discard(url)]
