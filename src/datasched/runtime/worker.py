"""What runs on a Dask worker: the cache plugin and the packet task (PROOF's worker side).

A packet is an event range of one file. The task makes the file readable through the node's
:class:`~datasched.runtime.diskcache.DiskCache` (a hit, a copy from a peer's cache over Dask's
comms, or a throttled copy from tertiary storage), opens the range lazily
(:mod:`~datasched.runtime.events`: only the branches the processor touches are read), runs the
user's processor (shipped by value from the master) and returns its accumulator with the
packet's statistics (PROOF keeps the same per packet).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from datasched.runtime.closing import quiet_heartbeat_at_close
from datasched.runtime.compute import PacketError, run_processor
from datasched.runtime.diskcache import Acquired, DiskCache, StagingArea
from datasched.runtime.events import ReadSpec, forget_open_files
from datasched.runtime.peers import (
    PEER_OP,
    CorruptCopy,
    PeerServer,
    await_peer,
    peer_copy,
    peer_state,
    peer_status,
)
from datasched.runtime.priority import packet_priority, thread_nice
from datasched.runtime.processor import ShippedProcessor, unship, user_traceback
from datasched.runtime.sandboxed import JobStopped, job_stopped, sandboxed_packet
from datasched.runtime.storage import (
    BACKOFF_S,
    RETRIES,
    LocalDiskFull,
    StorageError,
    Throttle,
    copy_file,
)
from datasched.sandbox.confine import Confinement, UserCode

__all__ = [
    "CACHE_DIR_ENV",
    "DISK_FULL_NOTE",
    "PLUGIN_NAME",
    "CacheDirError",
    "CachePlugin",
    "PacketError",
    "PacketResult",
    "PacketSpec",
    "acquire_file",
    "cache_contents",
    "cache_plugin",
    "clear_cache",
    "node_cache_dir",
    "packet_on",
    "peer_wait_s",
    "process_events",
    "release_file",
    "run_packet",
]

PLUGIN_NAME = "datasched-cache"
CACHE_DIR_ENV = "DATASCHED_CACHE_DIR"
"""Set on a worker, it overrides the master's ``--cache-dir`` for that worker (node-local
scratch that differs between machines)."""

log = logging.getLogger("datasched.worker")


def node_cache_dir(root: str | Path, node_name: str) -> Path:
    """The cache directory of the worker named ``node_name`` under ``root``."""
    return Path(root) / re.sub(r"[^A-Za-z0-9._-]", "_", node_name)


class CacheDirError(RuntimeError):
    """A worker cannot create or use its cache directory; the message says which and why."""


class CachePlugin(WorkerPlugin):
    """Gives each worker its persistent :class:`DiskCache`, its tertiary throttle, and serves
    its cache to peers (:mod:`~datasched.runtime.peers`).

    Registered again by every run, so that a run's settings (cache directory, capacity,
    throttle) take effect on a cluster that served an earlier run; set up again (same
    directory, same contents) when a worker restarts under its name.
    """

    idempotent = False

    def __init__(
        self,
        root: str,
        capacity_bytes: int,
        *,
        tertiary_bytes_per_s: float | None = None,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
        compute_slots: int = 1,
    ) -> None:
        self.root = root
        self.compute_slots = compute_slots
        """Packets that compute at once on a worker: its slots. A worker has more threads
        (a slot's next packet fetches its file meanwhile), but no more compute than the
        core's model gives it; extra threads computing only slow each other down."""
        self.capacity_bytes = capacity_bytes
        self.tertiary_bytes_per_s = tertiary_bytes_per_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.cache: DiskCache | None = None
        self.staging: StagingArea | None = None
        self.throttle: Throttle | None = None
        self.pins: dict[int, list[str]] = {}
        """The master's pins on this worker: token -> files."""
        self.disk_full_noted = False
        self.compute: threading.BoundedSemaphore | None = None
        """Held by a packet while it computes (made on the worker: locks do not pickle)."""
        self.closing: threading.Event | None = None
        """Set when the plugin is torn down (the worker closes, or a run registers a new
        one): reads from storage stop retrying, so that a worker that lost its scheduler is
        not held open by threads retrying a storage host it cannot reach."""

    def setup(self, worker: Any) -> None:
        root = os.environ.get(CACHE_DIR_ENV) or self.root
        directory = node_cache_dir(root, str(worker.name))
        try:
            self.cache = DiskCache(directory, self.capacity_bytes)
            self.staging = StagingArea(directory.with_name(directory.name + ".staging"))
        except OSError as exc:
            raise CacheDirError(
                f"worker {worker.name}: cannot create the cache directory {directory}: "
                f"{exc.strerror or exc}"
            ) from exc
        self.throttle = Throttle(self.tertiary_bytes_per_s)
        self.compute = threading.BoundedSemaphore(max(self.compute_slots, 1))
        self.closing = threading.Event()
        self.pins = {}
        self.disk_full_noted = False
        worker.handlers[PEER_OP] = PeerServer(self.cache).serve
        quiet_heartbeat_at_close(worker)

    def teardown(self, worker: Any) -> None:
        if self.closing is not None:
            self.closing.set()
        handler = worker.handlers.get(PEER_OP)
        if isinstance(getattr(handler, "__self__", None), PeerServer):
            del worker.handlers[PEER_OP]


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
    processor: ShippedProcessor
    read: ReadSpec = field(default_factory=ReadSpec)
    cache_fill: bool = True
    peer: str | None = None
    """The Dask address of a worker caching the file: read it from there."""
    replicate: bool = False
    peers: tuple[str, ...] = ()
    """Other workers to ask before fetching from tertiary storage (peer reads allowed): one
    of them may have the file, or be fetching it, by now."""
    use_cache: bool = True
    """Read the node's own cached copy when it has one: for every policy that uses the
    caches (fills them, or reads where data lies); a policy without caches (the processing
    farm, plain splitting) reads tertiary storage even where an earlier run or the
    calibration left a copy."""
    nice: int | None = None
    """The OS priority to compute it at (its session's, ``Policy.packet_nice``), or None."""
    code: UserCode | None = None
    """The service's jobs: the user's processor as data, run in a sandbox
    (:mod:`datasched.sandbox`) with ``confine``, its result returned as opaque bytes; None:
    ``processor`` runs in this process (``datasched run``: the user's own code)."""
    confine: Confinement | None = None
    cpu_budget_s: float | None = None
    """What the job has left of its CPU time: this packet's sandbox is killed past it."""
    wall_budget_s: float | None = None
    """What the job has left of its wall time, likewise."""
    token: str = ""
    """The job's name on the workers (its run and id): :func:`~datasched.runtime.sandboxed.
    abort_job` stops its packets."""


@dataclass(slots=True)
class PacketResult:
    """What a packet did: its accumulator and PROOF-style statistics."""

    packet_id: int
    job_id: int
    node: str
    n_events: int
    source: str  # "cache", "peer", "tertiary", "staged" (fetched for an earlier packet), "direct"
    bytes_from_tertiary: int
    bytes_from_peer: int
    read_s: float
    compute_s: float
    accumulator: Any
    cache_added: list[str] = field(default_factory=list)
    cache_evicted: list[str] = field(default_factory=list)
    bytes_read: int = 0
    """Stored bytes of the baskets the packet read (the branches it used)."""
    cpu_s: float = 0.0
    """CPU seconds the packet's thread used (reading, decompressing, processing)."""
    started: float = 0.0
    """Wall-clock time (``time.time()``) the task started on the worker."""
    slot_at: float | None = None
    """Wall-clock time (``time.time()``) the packet got its slot: its file was here and the
    slot's CPU free, so it began to compute. Between ``started`` and this, it fetched its
    file and waited behind the other packets on the node (docs/service-whatif.md);
    None: not known."""
    note: str = ""
    """Something to tell the user once (a full cache disk)."""
    nice: int | None = None
    """The nice value its thread computed at (None: not asked for)."""
    cache_corrupted: list[str] = field(default_factory=list)
    """Files whose copy on this node (its cache's, or one arriving from a peer) failed its
    size or adler32 check since the node's last result: dropped, fetched again, not read."""


def cache_plugin(worker: Any = None) -> tuple[str, CachePlugin]:
    """``(name, plugin)`` of ``worker`` (this task's worker when None), which must have the
    cache plugin registered."""
    if worker is None:
        worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, CachePlugin) or plugin.cache is None:
        raise RuntimeError(f"worker {worker.name}: the datasched cache plugin is not registered")
    return str(worker.name), plugin


def peer_wait_s(throttle: Throttle | None, file_bytes: int) -> float:
    """How long a reader waits for a peer's fetch in flight: as long as its own fetch would
    take at this node's tertiary rate (a second without a rate)."""
    rate = throttle.bytes_per_s if throttle is not None else None
    return file_bytes / rate if rate else 1.0


def fetcher(
    plugin: CachePlugin,
    url: str,
    file_bytes: int,
    peer: str | None,
    worker: Any,
    *,
    durable: bool = True,
    peers: tuple[str, ...] = (),
) -> tuple[Callable[[Path], int], dict[str, Any]]:
    """``fetch(dest) -> bytes`` bringing ``url`` from the peer at ``peer`` (waiting for its
    fetch in flight, at most as long as our own would take) or else from tertiary storage,
    and the dict where it records ``source`` and ``from_peer``. ``durable``: the copy is a
    cache entry, flushed to disk (a staged copy for one reader is not).

    Before tertiary storage, each of ``peers`` is asked whether it has the file by now, or
    is fetching it: then the copy comes from there (one tertiary read for the cluster, not
    one for each node that wanted the file at about the same time). Two nodes fetching it at
    once see each other; the one whose fetch began first goes on (by the workers' clocks,
    the lower address on a tie) and the other waits for it. An address alone decided
    before, so a worker never waited for a peer of higher address however long that peer
    had been fetching: the demo read 4.1 to 4.8 MB from tertiary storage for 3.7 MB."""
    info: dict[str, Any] = {"source": "cache", "from_peer": 0, "corrupted": []}
    limit_s = peer_wait_s(plugin.throttle, file_bytes)

    def from_peer(address: str, dest: Path) -> int | None:
        if not await_peer(lambda: peer_state(worker, address, url), limit_s):
            return None
        try:
            n = peer_copy(worker, address, url, dest, file_bytes, durable=durable)
        except CorruptCopy as exc:
            log.warning("%s", exc)
            info["corrupted"].append(url)
            return None  # not used: read from the next source
        except StorageError:
            return None  # evicted on the peer meanwhile, or the peer is gone
        info["source"], info["from_peer"] = "peer", n
        return n

    def fetch(dest: Path) -> int:
        if peer is not None:
            n = from_peer(peer, dest)
            if n is not None:
                return n
        mine = str(getattr(worker, "address", ""))
        began = plugin.cache.status(url)[1] if plugin.cache is not None else None
        me = (math.inf if began is None else began, mine)
        for other in peers:
            if other == peer:
                continue
            state, since = peer_status(worker, other, url)
            earlier = state == "fetching" and (math.inf if since is None else since, other) < me
            if state == "cached" or earlier:
                n = from_peer(other, dest)
                if n is not None:
                    return n
        info["source"] = "tertiary"
        return copy_file(
            url,
            dest,
            throttle=plugin.throttle,
            retries=plugin.retries,
            backoff_s=plugin.backoff_s,
            expected_bytes=file_bytes,
            durable=durable,
            stop=plugin.closing,
        )

    return fetch, info


DISK_FULL_NOTE = "the cache disk is full"
"""In the note a node's first read-through gives: ``node N: the cache disk is full (...);
reading on without caching``."""


def _note_disk_full(node: str, plugin: CachePlugin, exc: BaseException) -> str:
    if plugin.disk_full_noted:
        return ""
    plugin.disk_full_noted = True
    note = f"node {node}: {DISK_FULL_NOTE} ({exc}); reading on without caching"
    log.warning(note)
    return note


def acquire_file(
    node: str, plugin: CachePlugin, spec: PacketSpec, worker: Any
) -> tuple[Acquired | None, bool, dict[str, Any], str]:
    """The packet's file made readable: ``(acquired, kept in the cache, fetch info, note)``;
    ``acquired`` is None when the local disk is full and the file is to be read where it is.

    A file in the node's own cache is read from there when the packet uses the caches
    (``use_cache``), whether it may fill the cache or not (a packet of a pull policy reads
    data where it lies: here, its own disk) and whether a peer holds it too. If the peer has
    it only announced (its subjob will read it, its fetch has not begun), this node fetches
    it from tertiary storage and keeps it, when it may cache: the master learns of it, and
    the peer then reads it from here instead of fetching it too."""
    cache, staging = plugin.cache, plugin.staging
    assert cache is not None
    assert staging is not None
    peer, keep = spec.peer, spec.cache_fill and (spec.peer is None or spec.replicate)
    if (spec.use_cache and cache.state(spec.url) == "cached") or (
        peer is not None and spec.cache_fill and peer_state(worker, peer, spec.url) == "absent"
    ):
        peer, keep = None, True
    fetch, info = fetcher(
        plugin, spec.url, spec.file_bytes, peer, worker, durable=keep, peers=spec.peers
    )
    try:
        if keep:
            got = cache.acquire(spec.url, spec.file_bytes, fetch)
        else:
            got = staging.acquire(spec.url, fetch)
            if got.bytes_fetched == 0:
                info["source"] = "staged"
    except LocalDiskFull as exc:
        info["source"] = "direct"
        return None, False, info, _note_disk_full(node, plugin, exc)
    except StorageError as exc:
        if exc.transient:
            raise  # the master puts the packet's events back
        raise PacketError("data", spec.url, exc.reason) from exc
    if got.hit:
        info["source"] = "cache"
    return got, keep, info, ""


def release_file(plugin: CachePlugin, got: Acquired | None, keep: bool) -> None:
    """Let go of what :func:`acquire_file` made readable (the cache may evict it again)."""
    if got is None:
        return
    if keep:
        assert plugin.cache is not None
        plugin.cache.release(got)
    else:
        assert plugin.staging is not None
        plugin.staging.release(got)


def process_events(spec: PacketSpec, path: str, repeats: int = 1) -> tuple[Any, int, float, float]:
    """Open the packet's events and run its processor ``repeats`` times: ``(accumulator,
    bytes read, open seconds, least compute seconds)``."""
    try:
        proc = unship(spec.processor)
    except Exception as exc:
        raise PacketError(
            "processor",
            spec.url,
            f"processor {spec.processor.name} cannot be loaded on this worker: "
            f"{type(exc).__name__}: {exc}",
            user_traceback(exc),
        ) from exc
    return run_processor(
        proc,
        spec.processor.name,
        path,
        spec.url,
        spec.tree,
        spec.read,
        spec.local_start,
        spec.local_stop,
        repeats,
    )


def run_packet(spec: PacketSpec) -> PacketResult | None:
    """The Dask task of one packet (runs on the worker it is pinned to); None for a packet
    whose job was stopped (:class:`~datasched.runtime.sandboxed.JobStopped`: no failure)."""
    try:
        return packet_on(get_worker(), spec)
    except JobStopped:
        return None


def packet_on(worker: Any, spec: PacketSpec) -> PacketResult:
    """Run one packet on ``worker`` (a Dask worker with the cache plugin);
    :class:`~datasched.runtime.sandboxed.JobStopped` for a sandboxed job's packet whose job
    was stopped."""
    if spec.code is not None and job_stopped(spec.token):
        raise JobStopped(spec.token)  # before its file is fetched
    started = time.time()
    cpu0 = time.thread_time()
    node, plugin = cache_plugin(worker)
    t0 = time.perf_counter()
    got, keep, info, note = acquire_file(node, plugin, spec, worker)
    assert plugin.compute is not None
    try:
        # The file is here: compute when the slot's CPU is free, at the session's priority.
        with plugin.compute, packet_priority(spec.nice) as nice_note:
            slot_at = time.time()
            ran_at = thread_nice() if spec.nice is not None else None
            fetch_s = time.perf_counter() - t0
            where = str(got.path) if got is not None else spec.url
            if spec.code is not None:
                accumulator, bytes_read, open_s, compute_s, child_cpu = sandboxed_packet(
                    spec.code,
                    spec.confine or Confinement(),
                    where,
                    url=spec.url,
                    tree=spec.tree,
                    start=spec.local_start,
                    stop=spec.local_stop,
                    read=spec.read,
                    cpu_budget_s=spec.cpu_budget_s,
                    wall_budget_s=spec.wall_budget_s,
                    token=spec.token,
                )
                cpu0 -= child_cpu
            else:
                accumulator, bytes_read, open_s, compute_s = process_events(spec, where)
    except JobStopped:
        release_file(plugin, got, keep)
        raise
    except PacketError as exc:
        release_file(plugin, got, keep)
        if exc.kind == "data" and got is not None and plugin.cache is not None:
            forget_open_files(str(got.path))
            plugin.cache.discard(spec.url, unasked=True)  # a corrupted copy is not kept
        raise
    release_file(plugin, got, keep)
    assert plugin.cache is not None
    if got is not None and keep and not plugin.cache.intact(got):
        # Written to, replaced or truncated while it was read: the result is not used, the
        # master sends the packet again, and the next use checks the copy.
        forget_open_files(str(got.path))
        raise StorageError(spec.url, "the cached copy changed while it was read", transient=True)
    dropped, corrupted = plugin.cache.take_news()
    fetched = got.bytes_fetched if got is not None else bytes_read
    return PacketResult(
        packet_id=spec.packet_id,
        job_id=spec.job_id,
        node=node,
        n_events=spec.local_stop - spec.local_start,
        source=info["source"],
        bytes_from_tertiary=fetched if info["source"] in ("tertiary", "direct") else 0,
        bytes_from_peer=info["from_peer"],
        read_s=fetch_s + open_s,
        compute_s=compute_s,
        accumulator=accumulator,
        cache_added=got.added if got is not None else [],
        cache_evicted=(got.evicted if got is not None else []) + dropped,
        bytes_read=bytes_read,
        cpu_s=time.thread_time() - cpu0,
        started=started,
        slot_at=slot_at,
        note=note or nice_note,
        nice=ran_at,
        cache_corrupted=corrupted + info["corrupted"],
    )


def cache_contents(dask_worker: Any) -> list[str]:
    """The URLs a worker caches (``client.run`` passes ``dask_worker``)."""
    _, plugin = cache_plugin(dask_worker)
    assert plugin.cache is not None
    return plugin.cache.contents()


def clear_cache(dask_worker: Any) -> list[str]:
    """Empty a worker's cache (``client.run`` passes ``dask_worker``); returns what it dropped."""
    _, plugin = cache_plugin(dask_worker)
    assert plugin.cache is not None
    return plugin.cache.clear()
