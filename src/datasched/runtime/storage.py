"""Reading whole files from tertiary storage: any fsspec URL, retried with backoff, optionally
throttled to a per-node bandwidth that stands in for tape (ponce-hersch §2.4: 1 MB/s per node).

The worker cache (:mod:`datasched.runtime.diskcache`) calls :func:`copy_file` to bring a file
in; what it copies is exactly the bytes counted as read from tertiary storage.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec

__all__ = ["LocalDiskFull", "StorageError", "Throttle", "copy_file", "is_disk_full", "url_size"]

CHUNK_BYTES = 1 << 20
RETRIES = 5
BACKOFF_S = 0.5
"""A read is retried five times, 0.5 s after the first failure and twice as long after each
next: a storage server restarting within about 15 s costs a wait, not a failed job
(docs/deployment.md measures it)."""

XROOTD_CLIENT = {
    "ConnectionWindow": ("XRD_CONNECTIONWINDOW", 5),
    "ConnectionRetry": ("XRD_CONNECTIONRETRY", 1),
    "StreamErrorWindow": ("XRD_STREAMERRORWINDOW", 1),
    "StreamTimeout": ("XRD_STREAMTIMEOUT", 15),
    "RequestTimeout": ("XRD_REQUESTTIMEOUT", 120),
    "TimeoutResolution": ("XRD_TIMEOUTRESOLUTION", 1),
}
"""The XRootD client's own waits, bounded: by default it tries a refused connection five
times, each in a window of 120 s, so a read from a restarting server blocked for two minutes,
a connection that failed for good stayed failed for 30 minutes (its stream error window), and
a read from a server cut off the network waited 60 s for its stream to time out (checked every
15 s), its worker unable to close meanwhile. Here: one try of at most 5 s, a failure
remembered for 1 s, a silent stream dead after 15 s, a request after 120 s, checked every
second; :func:`copy_file`'s retries do the waiting. A value given in the environment
(``XRD_CONNECTIONWINDOW``, ``XRD_STREAMTIMEOUT``, ...) wins."""
_xrootd_bounded = False


class StorageError(OSError):
    """A file could not be read from storage (after retries); names the URL and the reason."""

    def __init__(self, url: str, reason: str, *, transient: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.transient = transient

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled across processes (worker -> master) with its fields, not only its message.
        return (_rebuild_storage_error, (self.url, self.reason, self.transient))


class LocalDiskFull(OSError):
    """The local disk (the cache's) is full: not a storage error, and not worth a retry. The
    reader goes on without caching."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says a local disk is full (or over its quota)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _rebuild_storage_error(url: str, reason: str, transient: bool) -> StorageError:
    return StorageError(url, reason, transient=transient)


class Throttle:
    """A token bucket shared by every reader on one node: at most ``bytes_per_s`` on average.

    ``None`` or ``inf`` means unthrottled. Thread-safe: a worker runs two packets at once.
    """

    def __init__(self, bytes_per_s: float | None, *, sleep: Callable[[float], None] = time.sleep):
        if bytes_per_s is not None and not bytes_per_s > 0:
            raise ValueError(f"tertiary_bytes_per_s: must be positive, got {bytes_per_s!r}")
        self.bytes_per_s = bytes_per_s
        self._sleep = sleep
        self._lock = threading.Lock()
        self._free_at = 0.0

    def consume(self, n_bytes: int) -> None:
        """Wait until ``n_bytes`` more may pass."""
        if self.bytes_per_s is None or self.bytes_per_s == float("inf"):
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + n_bytes / self.bytes_per_s
            wait = self._free_at - now
        if wait > 0:
            self._sleep(wait)


def bound_xrootd_waits(url: str) -> None:
    """Set :data:`XROOTD_CLIENT` in this process's XRootD client, once, before a ``root://``
    read."""
    global _xrootd_bounded
    if _xrootd_bounded or not url.startswith(("root://", "roots://")):
        return
    _xrootd_bounded = True
    try:
        from XRootD import client
    except ImportError:  # fsspec-xrootd will say what is missing
        return
    put: Any = client.EnvPutInt  # type: ignore[attr-defined]  # pyxrootd's stubs omit it
    for key, (variable, value) in XROOTD_CLIENT.items():  # ``XRD_`` + the key, in capitals
        if variable not in os.environ:
            put(key, value)


def url_size(url: str) -> int:
    """Size in bytes of the file at ``url``."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        return int(fs.size(path))
    except FileNotFoundError as exc:
        raise StorageError(url, "no such file") from exc


def copy_file(
    url: str,
    dest: Path,
    *,
    throttle: Throttle | None = None,
    retries: int = RETRIES,
    backoff_s: float = BACKOFF_S,
    expected_bytes: int | None = None,
    durable: bool = True,
    stop: threading.Event | None = None,
) -> int:
    """Copy ``url`` to the local path ``dest``; returns the bytes copied. ``durable``: flush
    it to disk before returning (a cache entry; not a copy staged for one reader).
    ``stop``: once set (the worker is closing), a failed read is not retried and a wait
    between tries ends at once: a worker that lost its scheduler (a host cut off the network)
    closes only when its reading threads are free, and its supervisor can bring it back only
    then (docs/deployment.md, "Faults and recovery").

    Transient read errors (``OSError`` other than a missing file: a server that refuses or
    drops the connection) are retried ``retries`` times with exponential backoff; a missing
    file, or one of the wrong size when ``expected_bytes`` is given, fails at once. A full
    local disk raises :class:`LocalDiskFull` at once. On failure ``dest`` does not exist.
    """
    bound_xrootd_waits(url)
    attempt = 0
    began = time.monotonic()
    while True:
        try:
            return _copy_once(url, dest, throttle, expected_bytes, durable)
        except (StorageError, LocalDiskFull):
            _remove(dest)
            raise
        except FileNotFoundError as exc:
            _remove(dest)
            raise StorageError(url, "no such file") from exc
        except OSError as exc:
            _remove(dest)
            closing = stop is not None and stop.is_set()
            if attempt >= retries or closing:
                took = time.monotonic() - began
                why = "the worker is closing: no retry after" if closing else "read failed after"
                raise StorageError(
                    url,
                    f"{why} {attempt + 1} attempts over {took:.0f} s: {exc}",
                    transient=True,
                ) from exc
            if stop is not None:
                stop.wait(backoff_s * 2**attempt)
            else:
                time.sleep(backoff_s * 2**attempt)
            attempt += 1


def _copy_once(
    url: str, dest: Path, throttle: Throttle | None, expected: int | None, durable: bool
) -> int:
    copied = 0
    with fsspec.open(url, "rb") as src, dest.open("wb") as out:
        while True:
            chunk = src.read(CHUNK_BYTES)
            if not chunk:
                break
            if throttle is not None:
                throttle.consume(len(chunk))
            try:
                out.write(chunk)
            except OSError as exc:
                if is_disk_full(exc):
                    raise LocalDiskFull(exc.errno, f"{dest.parent}: {exc.strerror}") from exc
                raise
            copied += len(chunk)
        try:
            out.flush()
            if durable:
                os.fsync(out.fileno())
        except OSError as exc:
            if is_disk_full(exc):
                raise LocalDiskFull(exc.errno, f"{dest.parent}: {exc.strerror}") from exc
            raise
    if expected is not None and copied != expected:
        raise StorageError(url, f"expected {expected} bytes, read {copied} (file changed?)")
    return copied


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
