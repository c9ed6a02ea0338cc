"""A node's persistent disk cache of whole files, LRU by bytes (ponce-hersch §2.3 on real disks).

Why whole files and not event blocks: tertiary systems stage whole files, a ROOT file is only
readable as a whole (its directory and streamers sit at its ends), and a copied file can be
checked byte for byte. Each file maps to one contiguous event range, so the master's cache
directory stays in event ranges like the simulator's. The price: the first packet that touches
a file brings in all of it; packets are cut at file boundaries so that the price is paid once.

The cache lives in a directory of its own (never under Dask's scratch space, which is deleted
when a worker closes) with an ``index.json`` written atomically after each change; a restarted
worker finds its cache intact. Files are pinned while packets read them, and never evicted
while pinned. A second reader of a file being fetched waits for that fetch.

Integrity (docs/runtime.md, "Faults"): each copy's adler32 is recorded in the index when it is
fetched. A copy is used only while its size, inode and times are those it had when its checksum
was last verified in this process: every use costs one ``stat``; the first use in a process,
and the first after any change, reads the whole copy and checks its adler32. A copy that fails
is dropped and fetched again, never read. A full disk (``ENOSPC``, ``EDQUOT``, or less free
space than the file needs even after evicting what may be evicted) raises
:class:`~datasched.runtime.storage.LocalDiskFull`, leaving no partial file behind: the caller
reads the file where it is. What was dropped without the caller's knowledge (evictions for a
fetch that then failed, corrupted copies) is kept for :meth:`DiskCache.take_news`, so that the
master's directory never believes a file is cached that is not.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from datasched._files import atomic_write_text
from datasched.runtime.storage import LocalDiskFull, is_disk_full

__all__ = ["Acquired", "DiskCache", "StagingArea", "cache_file_name", "file_adler32"]

INDEX = "index.json"
INDEX_VERSION = 2
"""Version 2 records each file's adler32; a version-1 index's files cannot be checked and are
dropped (fetched again when next used)."""
CHECK_BLOCK_BYTES = 1 << 20

log = logging.getLogger("datasched.cache")

Signature = tuple[int, int, int, int]
"""A copy's size, inode, modification and change times (ns): what a ``stat`` tells of it. A
copy written in place, replaced, truncated or touched has another (the change time cannot be
set back by a user, as the modification time can)."""


def file_adler32(path: Path) -> int:
    """The adler32 of the file at ``path`` (as XRootD computes it), read in 1 MiB blocks."""
    value = 1
    with path.open("rb") as fh:
        while block := fh.read(CHECK_BLOCK_BYTES):
            value = zlib.adler32(block, value)
    return value


def _signature(path: Path) -> Signature | None:
    try:
        st = os.stat(path)  # noqa: PTH116 (one syscall per use, on the hot path)
    except OSError:
        return None
    return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def cache_file_name(url: str) -> str:
    """The name a cached copy of ``url`` has inside any node's cache directory."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", url.rsplit("/", 1)[-1])[-60:]
    return f"{digest}-{base}"


@dataclass(slots=True)
class Acquired:
    """A file made readable for a packet. ``cached``: the path is the cache's own copy
    (release it when done); otherwise it is a temporary copy the caller deletes."""

    url: str
    path: Path
    hit: bool
    cached: bool
    bytes_fetched: int = 0
    added: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    signature: Signature | None = None
    """The cached copy's signature when it was verified (None: not a cache copy); a copy
    that no longer has it changed while in use (:meth:`DiskCache.intact`)."""


class DiskCache:
    """Whole-file LRU cache in ``root`` holding at most ``capacity_bytes``."""

    def __init__(self, root: Path, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes: must not be negative, got {capacity_bytes!r}")
        self.root = root
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # url -> bytes; oldest use first
        self._sums: dict[str, int] = {}
        """Each cached file's adler32, recorded when it was fetched."""
        self._checked: dict[str, Signature] = {}
        """Each copy's signature when this process last verified its checksum."""
        self._dropped: list[str] = []
        """Files dropped that no caller reported as evicted (for :meth:`take_news`)."""
        self._corrupted: list[str] = []
        """Files whose copy failed its check and was dropped (for :meth:`take_news`)."""
        self.disk_full: str = ""
        """Why the last fetch found the disk full ("" if none did)."""
        self._pins: Counter[str] = Counter()
        self._fetching: dict[str, threading.Event] = {}
        self._began: dict[str, float] = {}
        """When each fetch under way began (wall clock: peers on other machines compare it)."""
        self._reserved = 0
        root.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- queries -----------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(self._entries.values())

    def contents(self) -> list[str]:
        """URLs cached here, least recently used first."""
        with self._lock:
            return list(self._entries)

    def path_of(self, url: str) -> Path:
        return self.root / cache_file_name(url)

    def state(self, url: str) -> str:
        """``cached``, ``fetching`` (a fetch into the cache is under way) or ``absent``."""
        return self.status(url)[0]

    def status(self, url: str) -> tuple[str, float | None]:
        """:meth:`state`, and when the fetch under way began (None unless fetching)."""
        with self._lock:
            if url in self._entries:
                return "cached", None
            return ("fetching", self._began[url]) if url in self._fetching else ("absent", None)

    # -- use ---------------------------------------------------------------------------------

    def acquire(
        self,
        url: str,
        size: int,
        fetch: Callable[[Path], int],
        *,
        keep: bool = True,
    ) -> Acquired:
        """Make ``url`` readable: from the cache (a hit), or by ``fetch(dest) -> bytes``.

        With ``keep`` the fetched copy enters the cache (evicting least recently used
        unpinned files to make room); without it, or when it cannot fit, the copy is
        temporary. A cached file is pinned until :meth:`release`. A cached copy is checked
        before it is handed out (see the module docstring); one that fails is dropped and
        fetched again. Raises :class:`LocalDiskFull` when the disk has no room for the copy.
        """
        while True:
            verify = False
            waiting: threading.Event | None = None
            with self._lock:
                if url in self._entries:
                    self._entries.move_to_end(url)
                    self._pins[url] += 1
                    path = self.path_of(url)
                    seen = self._checked.get(url)
                    if seen is not None and seen == _signature(path):
                        return Acquired(url, path, hit=True, cached=True, signature=seen)
                    verify = True
                else:
                    waiting = self._fetching.get(url)
                    if waiting is None:
                        evicted: list[str] = []
                        room = self._make_room(size, evicted) if keep else "no"
                        if room == "yes":
                            self._fetching[url] = threading.Event()
                            self._began[url] = time.time()
                            self._reserved += size
                        if evicted:
                            self._save()
                        break
            if verify:
                checked = self._verify(url)
                if checked is not None:
                    return Acquired(url, path, hit=True, cached=True, signature=checked)
                continue  # dropped: fetch it again
            if waiting is not None:
                waiting.wait()
        if room != "yes":
            return self._temporary(url, size, fetch, evicted, full=room == "full")
        part = self.path_of(url).with_suffix(".part")
        try:
            n = fetch(part)
            checksum = file_adler32(part)
            part.replace(self.path_of(url))
            signature = _signature(self.path_of(url))
        except BaseException as exc:
            part.unlink(missing_ok=True)
            with self._lock:
                self._reserved -= size
                self._dropped += evicted
                self._began.pop(url, None)
                self._fetching.pop(url).set()
            if is_disk_full(exc) and not isinstance(exc, LocalDiskFull):
                raise self._full(exc) from exc
            if isinstance(exc, LocalDiskFull):
                self.disk_full = str(exc)
            raise
        with self._lock:
            self._reserved -= size
            self._entries[url] = n
            self._sums[url] = checksum
            if signature is not None:
                self._checked[url] = signature
            saved = self._save()
            if not saved:  # no room for the index: the copy would not survive a restart
                self._forget(url)
                self._dropped += evicted
            self._began.pop(url, None)
            self._fetching.pop(url).set()
            if saved:
                self._pins[url] += 1
        if not saved:
            raise self._full(OSError(errno.ENOSPC, "no space left for the cache's index"))
        return Acquired(url, self.path_of(url), False, True, n, [url], evicted, signature=signature)

    def _temporary(
        self, url: str, size: int, fetch: Callable[[Path], int], evicted: list[str], *, full: bool
    ) -> Acquired:
        """A copy for one reader, outside the cache (it does not fit, or is not to be kept)."""
        if full:
            with self._lock:
                self._dropped += evicted
            raise self._full(OSError(errno.ENOSPC, "less free space than the file needs"))
        tmp = self.root / f"tmp-{os.getpid()}-{threading.get_ident()}-{cache_file_name(url)}"
        try:
            n = fetch(tmp)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            with self._lock:
                self._dropped += evicted
            if is_disk_full(exc) and not isinstance(exc, LocalDiskFull):
                raise self._full(exc) from exc
            raise
        return Acquired(url, tmp, hit=False, cached=False, bytes_fetched=n, evicted=evicted)

    def _full(self, exc: BaseException) -> LocalDiskFull:
        reason = getattr(exc, "strerror", None) or str(exc)
        self.disk_full = f"{self.root}: {reason}"
        return LocalDiskFull(getattr(exc, "errno", None) or errno.ENOSPC, self.disk_full)

    def _verify(self, url: str) -> Signature | None:
        """Check the cached copy of ``url`` (pinned by the caller) against its recorded size
        and adler32; returns its signature if it passes. One that fails is dropped (even if
        other readers hold it: they read their open handle), and the caller's pin with it."""
        path = self.path_of(url)
        before = _signature(path)
        with self._lock:
            expected = (self._entries.get(url), self._sums.get(url))
        problem = ""
        if before is None:
            problem = "missing"
        elif before[0] != expected[0]:
            problem = f"{before[0]} bytes, {expected[0]} expected"
        else:
            try:
                got = file_adler32(path)
            except OSError as exc:
                problem = f"unreadable: {exc}"
            else:
                if got != expected[1]:
                    problem = f"adler32 {got:08x}, {expected[1] or 0:08x} expected"
                elif _signature(path) != before:
                    problem = "changed while it was checked"
        with self._lock:
            if not problem:
                assert before is not None
                self._checked[url] = before
                return before
            self._unpin(url)
            # Another reader may have dropped it and fetched a good copy meanwhile: keep that.
            if url in self._entries and _signature(path) == before:
                self._forget(url)
                self._dropped.append(url)
                self._corrupted.append(url)
                self._save()
                log.warning("cache %s: dropped the copy of %s (%s)", self.root, url, problem)
        return None

    def intact(self, acquired: Acquired) -> bool:
        """Whether a cached copy handed out is still the one verified (not modified, replaced
        or truncated while it was read); True for temporary copies."""
        return acquired.signature is None or _signature(acquired.path) == acquired.signature

    def checksum(self, url: str) -> int | None:
        """The adler32 recorded for the cached copy of ``url`` (None: not cached)."""
        with self._lock:
            return self._sums.get(url) if url in self._entries else None

    def verified(self, url: str) -> bool:
        """Whether ``url`` is cached and its copy passes its check now (a peer is about to be
        served it); a copy that fails is dropped."""
        with self._lock:
            if url not in self._entries:
                return False
            self._pins[url] += 1
            seen = self._checked.get(url)
            if seen is not None and seen == _signature(self.path_of(url)):
                self._unpin(url)
                return True
        if self._verify(url) is None:
            return False
        with self._lock:
            self._unpin(url)
        return True

    def take_news(self) -> tuple[list[str], list[str]]:
        """``(dropped, corrupted)`` since the last call: files dropped that no caller reported
        as evicted (and not cached again since), and those whose copy failed its check. The
        worker passes them on to the master with its next result."""
        with self._lock:
            dropped = [u for u in dict.fromkeys(self._dropped) if u not in self._entries]
            corrupted = self._corrupted
            self._dropped, self._corrupted = [], []
        return dropped, corrupted

    def release(self, acquired: Acquired) -> None:
        """Unpin a cached file, or delete a temporary copy."""
        if not acquired.cached:
            acquired.path.unlink(missing_ok=True)
            return
        with self._lock:
            self._pins[acquired.url] -= 1
            if self._pins[acquired.url] <= 0:
                del self._pins[acquired.url]

    def pin(self, url: str) -> bool:
        """Keep ``url`` from eviction until :meth:`unpin` (romosan's pin); False if it is not
        cached (nothing to pin)."""
        with self._lock:
            if url not in self._entries:
                return False
            self._pins[url] += 1
            return True

    def unpin(self, url: str) -> None:
        with self._lock:
            self._unpin(url)

    def discard(self, url: str, *, unasked: bool = False) -> bool:
        """Drop ``url`` (e.g. a copy that turned out unreadable) unless it is pinned.
        ``unasked``: the master did not ask for it, so :meth:`take_news` reports it."""
        with self._lock:
            if url not in self._entries or self._pins[url]:
                return False
            self._drop(url)
            if unasked:
                self._dropped.append(url)
            self._save()
            return True

    def clear(self) -> list[str]:
        """Drop every unpinned file; returns their URLs."""
        with self._lock:
            gone = [url for url in self._entries if not self._pins[url]]
            for url in gone:
                self._drop(url)
            self._save()
            return gone

    # -- internals (called with the lock held) ------------------------------------------------

    def _unpin(self, url: str) -> None:
        if self._pins[url] > 0:
            self._pins[url] -= 1
        if self._pins[url] <= 0:
            del self._pins[url]

    def _make_room(self, size: int, evicted: list[str]) -> str:
        """``yes`` (room made, evicting least recently used unpinned files into
        ``evicted``), ``no`` (over the capacity however much is evicted: read through a
        temporary copy) or ``full`` (the disk has less free space than the file needs, even
        after evicting what may be evicted)."""
        if size > self.capacity_bytes:
            return "no"
        used = sum(self._entries.values()) + self._reserved
        unpinned = [url for url in self._entries if not self._pins[url]]
        freeable = sum(self._entries[u] for u in unpinned)
        if used - freeable + size > self.capacity_bytes:
            return "no"  # pinned files fill the cache: read through without keeping
        # The disk may hold less than the capacity (other files, a small volume): what is
        # fetched meanwhile (``_reserved``, counted whole) is yet to be written.
        free = self._free_bytes() - self._reserved
        if free + freeable < size:
            return "full"
        for url in unpinned:
            if used + size <= self.capacity_bytes and free >= size:
                break
            used -= self._entries[url]
            free += self._entries[url]
            self._drop(url)
            evicted.append(url)
        return "yes"

    def _free_bytes(self) -> int:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return 1 << 62  # cannot tell: let the write find out
        return st.f_bavail * st.f_frsize

    def _drop(self, url: str) -> None:
        self._forget(url)

    def _forget(self, url: str) -> None:
        del self._entries[url]
        self._sums.pop(url, None)
        self._checked.pop(url, None)
        self.path_of(url).unlink(missing_ok=True)

    def _save(self) -> bool:
        """Write the index; False when the disk has no room for it (the index on disk is
        then the previous one, and a restart drops what it does not list)."""
        files = [{"url": u, "bytes": n, "adler32": self._sums[u]} for u, n in self._entries.items()]
        doc = {"version": INDEX_VERSION, "files": files}
        try:
            atomic_write_text(self.root / INDEX, json.dumps(doc))
        except OSError as exc:
            if is_disk_full(exc):
                self.disk_full = f"{self.root}: {exc.strerror}"
                return False
            raise
        return True

    def _load(self) -> None:
        """Read the index, keeping only files present with their recorded size; anything
        else in the directory (partial fetches, strays) is deleted."""
        known: dict[str, tuple[int, int]] = {}
        try:
            doc = json.loads((self.root / INDEX).read_text())
            if doc.get("version") == INDEX_VERSION:
                for item in doc.get("files", []):
                    known[str(item["url"])] = (int(item["bytes"]), int(item["adler32"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
            known = {}
        keep_names = {INDEX}
        for url, (n, checksum) in known.items():
            path = self.path_of(url)
            if path.is_file() and path.stat().st_size == n:
                self._entries[url] = n
                self._sums[url] = checksum  # verified on first use
                keep_names.add(path.name)
        for path in self.root.iterdir():
            if path.name not in keep_names and path.is_file():
                path.unlink(missing_ok=True)
        # A smaller capacity than last time: trim to it.
        evicted: list[str] = []
        if sum(self._entries.values()) > self.capacity_bytes:
            self._make_room(0, evicted)
        self._save()


class StagingArea:
    """Where files read without caching are staged: the last ``slots`` files, kept only
    while a packet stream still reads them (tape systems stage a file once for a reader).

    Without it a policy that caches nothing would fetch a whole file again for every packet;
    with it a subjob's packets over one file fetch it once. Staged files are not the cache:
    reading one is reported as a staged read, not a cache hit, and nothing is reported to the
    master.
    """

    def __init__(self, root: Path, slots: int = 2) -> None:
        self.root = root
        self.slots = slots
        self._lock = threading.Lock()
        self._files: OrderedDict[str, Path] = OrderedDict()
        self._pins: Counter[str] = Counter()
        self._fetching: dict[str, threading.Event] = {}
        root.mkdir(parents=True, exist_ok=True)
        for stray in root.iterdir():
            stray.unlink(missing_ok=True)

    def acquire(self, url: str, fetch: Callable[[Path], int]) -> Acquired:
        while True:
            with self._lock:
                if url in self._files:
                    self._files.move_to_end(url)
                    self._pins[url] += 1
                    return Acquired(url, self._files[url], hit=False, cached=False)
                waiting = self._fetching.get(url)
                if waiting is None:
                    self._fetching[url] = threading.Event()
                    break
            waiting.wait()
        path = self.root / cache_file_name(url)
        try:
            n = fetch(path)
        finally:
            with self._lock:
                self._fetching.pop(url).set()
        with self._lock:
            self._files[url] = path
            self._pins[url] += 1
            for old in list(self._files):
                if len(self._files) <= self.slots:
                    break
                if not self._pins[old]:
                    self._files.pop(old).unlink(missing_ok=True)
        return Acquired(url, path, hit=False, cached=False, bytes_fetched=n)

    def release(self, acquired: Acquired) -> None:
        with self._lock:
            self._pins[acquired.url] -= 1
            if self._pins[acquired.url] <= 0:
                del self._pins[acquired.url]
