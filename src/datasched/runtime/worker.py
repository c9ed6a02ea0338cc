"""What runs on a Dask worker: the cache plugin and the packet task (PROOF's worker side).

A packet is an event range of one file. The task makes the file readable through the node's
:class:`~datasched.runtime.diskcache.DiskCache` (a hit, a copy from a peer's cache, or a
throttled copy from tertiary storage), reads the range with uproot, runs the user's processor
and returns its accumulator with the packet's statistics (PROOF keeps the same per packet).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from datasched.runtime.dataset import read_events
from datasched.runtime.diskcache import Acquired, DiskCache, StagingArea
from datasched.runtime.processor import Processor, load_processor
from datasched.runtime.storage import StorageError, Throttle, copy_file

__all__ = [
    "PLUGIN_NAME",
    "CachePlugin",
    "PacketError",
    "PacketResult",
    "PacketSpec",
    "cache_contents",
    "clear_cache",
    "node_cache_dir",
    "run_packet",
]

PLUGIN_NAME = "datasched-cache"


def node_cache_dir(root: str | Path, node_name: str) -> Path:
    """The cache directory of the worker named ``node_name`` under ``root``."""
    return Path(root) / re.sub(r"[^A-Za-z0-9._-]", "_", node_name)


class CachePlugin(WorkerPlugin):
    """Gives each worker its persistent :class:`DiskCache` and its tertiary throttle.

    Set up again (same directory, same contents) when a worker restarts under its name.
    """

    idempotent = True

    def __init__(
        self,
        root: str,
        capacity_bytes: int,
        *,
        tertiary_bytes_per_s: float | None = None,
        retries: int = 3,
        backoff_s: float = 0.2,
    ) -> None:
        self.root = root
        self.capacity_bytes = capacity_bytes
        self.tertiary_bytes_per_s = tertiary_bytes_per_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.cache: DiskCache | None = None
        self.staging: StagingArea | None = None
        self.throttle: Throttle | None = None
        self.processors: dict[tuple[str, str], Processor] = {}
        self.pins: dict[int, list[str]] = {}
        """The master's pins on this worker: token -> files."""

    def setup(self, worker: Any) -> None:
        directory = node_cache_dir(self.root, str(worker.name))
        self.cache = DiskCache(directory, self.capacity_bytes)
        self.staging = StagingArea(directory.with_name(directory.name + ".staging"))
        self.throttle = Throttle(self.tertiary_bytes_per_s)
        self.processors = {}
        self.pins = {}


@dataclass(frozen=True, slots=True)
class PacketSpec:
    """One packet: events ``[local_start, local_stop)`` of one file, for one job."""

    packet_id: int
    job_id: int
    url: str
    tree: str
    local_start: int
    local_stop: int
    file_bytes: int
    processor: str
    base_dir: str
    cache_fill: bool = True
    peer_path: str | None = None
    replicate: bool = False


@dataclass(slots=True)
class PacketResult:
    """What a packet did: its accumulator and PROOF-style statistics."""

    packet_id: int
    job_id: int
    node: str
    n_events: int
    source: str  # "cache", "peer", "tertiary" or "staged" (a file fetched for an earlier packet)
    bytes_from_tertiary: int
    bytes_from_peer: int
    read_s: float
    compute_s: float
    accumulator: Any
    cache_added: list[str] = field(default_factory=list)
    cache_evicted: list[str] = field(default_factory=list)


class PacketError(Exception):
    """A packet failed for a reason retrying elsewhere will not fix: its data or its code.

    ``kind`` is ``"data"`` (missing, unreadable or corrupted file) or ``"processor"`` (the
    user's code raised).
    """

    def __init__(self, kind: str, url: str, message: str) -> None:
        super().__init__(f"{url}: {message}")
        self.kind = kind
        self.url = url
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        return (PacketError, (self.kind, self.url, self.message))


def _plugin(worker: Any = None) -> tuple[str, CachePlugin]:
    if worker is None:
        worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, CachePlugin) or plugin.cache is None:
        raise RuntimeError(f"worker {worker.name}: the datasched cache plugin is not registered")
    return str(worker.name), plugin


PEER_POLL_S = 0.02


def _await_peer(
    path: Path,
    throttle: Throttle | None,
    spec: PacketSpec,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Whether the peer's cached copy at ``path`` is there to read, waiting for it while the
    peer is still fetching it (its ``.part`` file exists): that fetch started first, so it
    ends sooner than a fetch of our own would (DESIGN.md: "a second reader of data being
    fetched waits for it rather than fetching again"). The wait is bounded by the time our
    own fetch would take at this node's tertiary rate; past that, or if the peer's fetch
    fails, the caller reads from tertiary storage. It polls every ``PEER_POLL_S`` seconds
    of ``clock``, by ``sleep`` (tests pass a clock that moves only when slept on)."""
    if path.is_file():
        return True
    part = path.with_suffix(".part")
    rate = throttle.bytes_per_s if throttle is not None else None
    limit_s = spec.file_bytes / rate if rate else 1.0
    deadline = clock() + limit_s
    while part.exists() and clock() < deadline:
        sleep(PEER_POLL_S)
        if path.is_file():
            return True
    return path.is_file()


def run_packet(spec: PacketSpec) -> PacketResult:
    """The Dask task of one packet (runs on the worker it is pinned to)."""
    node, plugin = _plugin()
    cache = plugin.cache
    assert cache is not None
    t0 = time.perf_counter()
    source = "cache"
    from_peer = 0

    def fetch(dest: Path) -> int:
        nonlocal source, from_peer
        if spec.peer_path is not None and _await_peer(Path(spec.peer_path), plugin.throttle, spec):
            try:
                n = copy_file(spec.peer_path, dest, retries=0, expected_bytes=spec.file_bytes)
                source, from_peer = "peer", n
                return n
            except StorageError:
                pass  # evicted on the peer meanwhile: read from tertiary storage
        source = "tertiary"
        return copy_file(
            spec.url,
            dest,
            throttle=plugin.throttle,
            retries=plugin.retries,
            backoff_s=plugin.backoff_s,
            expected_bytes=spec.file_bytes,
        )

    keep = spec.cache_fill and (spec.peer_path is None or spec.replicate)
    staging = plugin.staging
    assert staging is not None
    try:
        if keep:
            got: Acquired = cache.acquire(spec.url, spec.file_bytes, fetch)
        else:
            got = staging.acquire(spec.url, fetch)
            if got.bytes_fetched == 0:
                source = "staged"
    except StorageError as exc:
        if exc.transient:
            raise  # the master puts the packet's events back
        raise PacketError("data", spec.url, exc.reason) from exc

    def release(acquired: Acquired) -> None:
        (cache if keep else staging).release(acquired)

    try:
        events = read_events(str(got.path), spec.tree, spec.local_start, spec.local_stop)
        if len(events) != spec.local_stop - spec.local_start:
            raise ValueError(
                f"read {len(events)} entries, expected {spec.local_stop - spec.local_start}"
            )
    except Exception as exc:
        release(got)
        cache.discard(spec.url)
        raise PacketError(
            "data", spec.url, f"cannot read entries {spec.local_start}-{spec.local_stop}: {exc}"
        ) from exc
    t1 = time.perf_counter()
    try:
        proc = plugin.processors.get((spec.processor, spec.base_dir))
        if proc is None:
            proc = load_processor(spec.processor, Path(spec.base_dir))
            plugin.processors[(spec.processor, spec.base_dir)] = proc
        accumulator = proc.process(events)
    except Exception as exc:
        raise PacketError(
            "processor",
            spec.url,
            f"processor {spec.processor} failed on entries {spec.local_start}-"
            f"{spec.local_stop}: {type(exc).__name__}: {exc}",
        ) from exc
    finally:
        release(got)
    t2 = time.perf_counter()
    if got.hit:
        source = "cache"
    return PacketResult(
        packet_id=spec.packet_id,
        job_id=spec.job_id,
        node=node,
        n_events=spec.local_stop - spec.local_start,
        source=source,
        bytes_from_tertiary=got.bytes_fetched if source == "tertiary" else 0,
        bytes_from_peer=from_peer,
        read_s=t1 - t0,
        compute_s=t2 - t1,
        accumulator=accumulator,
        cache_added=got.added,
        cache_evicted=got.evicted,
    )


def cache_contents(dask_worker: Any) -> list[str]:
    """The URLs a worker caches (``client.run`` passes ``dask_worker``)."""
    _, plugin = _plugin(dask_worker)
    assert plugin.cache is not None
    return plugin.cache.contents()


def clear_cache(dask_worker: Any) -> list[str]:
    """Empty a worker's cache (``client.run`` passes ``dask_worker``); returns what it dropped."""
    _, plugin = _plugin(dask_worker)
    assert plugin.cache is not None
    return plugin.cache.clear()
