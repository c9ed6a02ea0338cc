"""Peer reads over the cluster's own network: a worker copies a file that another worker
caches from that worker, through Dask's comms, so peer reads work across machines and need no
shared filesystem (ponce-hersch §4.2: a node reads data cached on another node rather than
from tertiary storage).

Every worker serves its cache through one handler of its Dask server (:data:`PEER_OP`),
registered by the cache plugin: ``state`` says whether a file is cached there, being fetched,
or absent (``status`` adds when that fetch began); ``read`` returns a block of a cached file
(pinned while it is read, so it is not evicted under the reader); ``sum`` the adler32 the
cache recorded when it fetched the file. The reading worker calls it from a packet's or a
move's thread through its own connection pool (``worker.rpc``), block after block, and checks
the size and the adler32 of what it received against the peer's record: a corrupted copy is
served to nobody (the peer checks its copy before serving the first block, and the reader
checks what arrived).
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distributed.core import send_recv
from distributed.utils import sync

from datasched.runtime.storage import LocalDiskFull, StorageError, is_disk_full

if TYPE_CHECKING:
    from datasched.runtime.diskcache import DiskCache

__all__ = [
    "PEER_BLOCK_BYTES",
    "PEER_CONNECT_S",
    "PEER_OP",
    "PEER_POLL_S",
    "CorruptCopy",
    "PeerServer",
    "await_peer",
    "peer_copy",
    "peer_state",
    "peer_status",
]

PEER_OP = "datasched_peer"
PEER_BLOCK_BYTES = 4 << 20
"""Bytes per message: a file travels in blocks, so no message holds a whole large file."""
PEER_POLL_S = 0.05
PEER_CONNECT_S = 5.0
"""How long a worker tries to connect to a peer before it counts the peer as unreachable (the
file absent there: read from the next source). Dask's own connect timeout (30 s by default)
retries a refused connection until it runs out: a packet sent while one of its peers was
being lost (a worker killed, before the master saw it go) waited that long before reading
from tertiary storage. A connection between workers takes milliseconds; a peer that gives
none in this time is gone or overloaded, and tertiary storage is the better source."""


class CorruptCopy(StorageError):
    """A peer's copy arrived with another adler32 than the peer recorded for it."""


class PeerServer:
    """What a worker serves its cache with: :meth:`serve` is its handler
    (``worker.handlers[PEER_OP]``)."""

    def __init__(self, cache: DiskCache) -> None:
        self.cache = cache

    async def serve(
        self, action: str = "state", url: str = "", offset: int = 0, size: int = 0
    ) -> Any:
        """``state`` of ``url`` here, or ``read`` a block of it (None: not cached)."""
        if action == "state":
            return self.cache.state(url)
        if action == "status":
            return list(self.cache.status(url))
        if action == "read":
            return await asyncio.to_thread(self._read, url, offset, size)
        if action == "sum":
            return self.cache.checksum(url)
        raise ValueError(f"{PEER_OP}: unknown action {action!r}")

    def _read(self, url: str, offset: int, size: int) -> bytes | None:
        """Bytes ``[offset, offset + size)`` of the cached copy of ``url``, or None when it is
        not cached (evicted meanwhile, or its copy failed its check: checked before the first
        block is served)."""
        if offset == 0 and not self.cache.verified(url):
            return None
        if not self.cache.pin(url):
            return None
        try:
            with self.cache.path_of(url).open("rb") as fh:
                fh.seek(offset)
                return fh.read(size)
        except OSError:
            return None
        finally:
            self.cache.unpin(url)


def _call(worker: Any, address: str, **kwargs: Any) -> Any:
    """The peer handler of the worker at ``address``, called from a task's thread through the
    worker's connection pool (what ``worker.rpc(address)`` does), with at most
    :data:`PEER_CONNECT_S` to connect; the reply itself (a block of a file) is not bounded."""

    async def call() -> Any:
        pool = worker.rpc
        comm = await pool.connect(address, timeout=PEER_CONNECT_S)
        try:
            return await send_recv(
                comm=comm,
                op=PEER_OP,
                serializers=pool.serializers,
                deserializers=pool.deserializers,
                **kwargs,
            )
        finally:
            pool.reuse(address, comm)

    return sync(worker.loop, call)


def peer_state(worker: Any, address: str, url: str) -> str:
    """``cached``, ``fetching`` or ``absent`` (also when the peer cannot be reached)."""
    try:
        return str(_call(worker, address, action="state", url=url))
    except Exception:
        return "absent"


def peer_status(worker: Any, address: str, url: str) -> tuple[str, float | None]:
    """:func:`peer_state`, and when the peer's fetch began (None unless ``fetching``)."""
    try:
        state, began = _call(worker, address, action="status", url=url)
        return str(state), None if began is None else float(began)
    except Exception:
        return "absent", None


def await_peer(
    state: Callable[[], str],
    limit_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Whether the peer's cached copy is there to read, waiting for it while the peer is still
    fetching it: that fetch started first, so it ends sooner than a fetch of our own would
    (docs/design.md: "a second reader of data being fetched waits for it rather than fetching
    again"). The wait is bounded by ``limit_s``, the time our own fetch would take; past
    that, or if the peer's fetch fails, the caller reads from tertiary storage. ``state()``
    is polled every :data:`PEER_POLL_S` seconds of ``clock``, by ``sleep`` (tests pass a clock
    that moves only when slept on)."""
    now = state()
    if now == "cached":
        return True
    deadline = clock() + limit_s
    while now == "fetching" and clock() < deadline:
        sleep(PEER_POLL_S)
        now = state()
    return now == "cached"


def peer_copy(
    worker: Any, address: str, url: str, dest: Path, expected_bytes: int, *, durable: bool = True
) -> int:
    """Copy the peer's cached ``url`` to the local ``dest`` over Dask's comms; returns the
    bytes copied. Raises :class:`StorageError` (``dest`` removed) if the peer does not have
    it, is gone, or the copy is not ``expected_bytes`` long, and :class:`CorruptCopy` if its
    adler32 is not the one the peer recorded when it fetched the file."""
    copied = 0
    checksum = 1
    try:
        with dest.open("wb") as out:
            while copied < expected_bytes:
                size = min(PEER_BLOCK_BYTES, expected_bytes - copied)
                block = _call(worker, address, action="read", url=url, offset=copied, size=size)
                if not block:
                    break
                out.write(block)
                checksum = zlib.adler32(block, checksum)
                copied += len(block)
            out.flush()
            if durable:
                os.fsync(out.fileno())
    except StorageError:
        dest.unlink(missing_ok=True)
        raise
    except Exception as exc:
        dest.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise LocalDiskFull(getattr(exc, "errno", None), str(exc)) from exc
        raise StorageError(url, f"peer {address}: {type(exc).__name__}: {exc}") from exc
    if copied != expected_bytes:
        dest.unlink(missing_ok=True)
        raise StorageError(url, f"peer {address} has {copied} of {expected_bytes} bytes")
    try:
        recorded = _call(worker, address, action="sum", url=url)
    except Exception as exc:
        dest.unlink(missing_ok=True)
        raise StorageError(url, f"peer {address}: {type(exc).__name__}: {exc}") from exc
    if recorded is None:
        dest.unlink(missing_ok=True)
        raise StorageError(url, f"peer {address} dropped its copy while it was read")
    if int(recorded) != checksum:
        dest.unlink(missing_ok=True)
        raise CorruptCopy(
            url, f"copy from peer {address}: adler32 {checksum:08x}, {int(recorded):08x} recorded"
        )
    return copied
