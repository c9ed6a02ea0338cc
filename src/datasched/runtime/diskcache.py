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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from datasched._files import atomic_write_text

__all__ = ["Acquired", "DiskCache", "StagingArea", "cache_file_name"]

INDEX = "index.json"


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


class DiskCache:
    """Whole-file LRU cache in ``root`` holding at most ``capacity_bytes``."""

    def __init__(self, root: Path, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes: must not be negative, got {capacity_bytes!r}")
        self.root = root
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # url -> bytes; oldest use first
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
        temporary. A cached file is pinned until :meth:`release`.
        """
        while True:
            with self._lock:
                if url in self._entries:
                    self._entries.move_to_end(url)
                    self._pins[url] += 1
                    return Acquired(url, self.path_of(url), hit=True, cached=True)
                waiting = self._fetching.get(url)
                if waiting is None:
                    evicted: list[str] = []
                    cacheable = keep and self._make_room(size, evicted)
                    if cacheable:
                        self._fetching[url] = threading.Event()
                        self._began[url] = time.time()
                        self._reserved += size
                    if evicted:
                        self._save()
                    break
            waiting.wait()
        if not cacheable:
            tmp = self.root / f"tmp-{os.getpid()}-{threading.get_ident()}-{cache_file_name(url)}"
            n = fetch(tmp)
            return Acquired(url, tmp, hit=False, cached=False, bytes_fetched=n, evicted=evicted)
        part = self.path_of(url).with_suffix(".part")
        try:
            n = fetch(part)
            part.replace(self.path_of(url))
        except BaseException:
            with self._lock:
                self._reserved -= size
                self._began.pop(url, None)
                self._fetching.pop(url).set()
            raise
        with self._lock:
            self._reserved -= size
            self._entries[url] = n
            self._pins[url] += 1
            self._save()
            self._began.pop(url, None)
            self._fetching.pop(url).set()
        return Acquired(url, self.path_of(url), False, True, n, added=[url], evicted=evicted)

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
            if self._pins[url] > 0:
                self._pins[url] -= 1
            if self._pins[url] <= 0:
                del self._pins[url]

    def discard(self, url: str) -> bool:
        """Drop ``url`` (e.g. a copy that turned out unreadable) unless it is pinned."""
        with self._lock:
            if url not in self._entries or self._pins[url]:
                return False
            self._drop(url)
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

    def _make_room(self, size: int, evicted: list[str]) -> bool:
        if size > self.capacity_bytes:
            return False
        used = sum(self._entries.values()) + self._reserved
        if used + size <= self.capacity_bytes:
            return True
        unpinned = [url for url in self._entries if not self._pins[url]]
        freeable = sum(self._entries[u] for u in unpinned)
        if used - freeable + size > self.capacity_bytes:
            return False  # pinned files fill the cache: read through without keeping
        for url in unpinned:
            if used + size <= self.capacity_bytes:
                break
            used -= self._entries[url]
            self._drop(url)
            evicted.append(url)
        return True

    def _drop(self, url: str) -> None:
        del self._entries[url]
        self.path_of(url).unlink(missing_ok=True)

    def _save(self) -> None:
        doc = {"version": 1, "files": [{"url": u, "bytes": n} for u, n in self._entries.items()]}
        atomic_write_text(self.root / INDEX, json.dumps(doc))

    def _load(self) -> None:
        """Read the index, keeping only files present with their recorded size; anything
        else in the directory (partial fetches, strays) is deleted."""
        known: dict[str, int] = {}
        try:
            doc = json.loads((self.root / INDEX).read_text())
            for item in doc.get("files", []):
                known[str(item["url"])] = int(item["bytes"])
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
            known = {}
        keep_names = {INDEX}
        for url, n in known.items():
            path = self.path_of(url)
            if path.is_file() and path.stat().st_size == n:
                self._entries[url] = n
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
