"""A node's cache of whole files: the grain of real ROOT files, romosan, STAR and the grid.

Every set it takes and gives is of events, like :class:`~datasched.core.cache.RangeCache`, but
it holds, pins, refreshes and evicts whole files: data touching a file stands for the file.
Sizes are the files' own bytes. Eviction takes the file with the smallest replacement key
(least recently used by default) that is neither pinned nor being inserted.
"""

from __future__ import annotations

import heapq
import itertools

from datasched.core.data import DataSpace
from datasched.core.holds import Holds
from datasched.core.intervals import IntervalSet
from datasched.core.replacement import LRU, Replacement

__all__ = ["FileCache"]

_EMPTY = IntervalSet()


class FileCache(Holds):
    """Whole files of ``space`` within a budget of ``capacity_bytes``."""

    def __init__(
        self, space: DataSpace, capacity_bytes: float, replacement: Replacement = LRU
    ) -> None:
        if not capacity_bytes >= 0:
            raise ValueError(f"capacity_bytes: must not be negative, got {capacity_bytes!r}")
        self.space = space
        self._capacity = float(capacity_bytes)
        self.replacement = replacement
        self._keys: dict[int, tuple[float, int]] = {}
        """Cached file -> (replacement key, sequence number of the key)."""
        self._heap: list[tuple[float, int, int]] = []
        self._seq = itertools.count()
        self._used = 0.0
        self._content: IntervalSet | None = _EMPTY
        self._init_holds()

    # -- reading the state ------------------------------------------------------------------

    @property
    def content(self) -> IntervalSet:
        """Every event of every cached file."""
        if self._content is None:
            files = self.space.files
            self._content = IntervalSet.from_sorted(
                (files[i].start, files[i].stop) for i in sorted(self._keys)
            )
        return self._content

    @property
    def files(self) -> list[int]:
        """Indices of the cached files, in event order."""
        return sorted(self._keys)

    @property
    def capacity_bytes(self) -> float:
        return self._capacity

    @property
    def used_bytes(self) -> float:
        return self._used

    @property
    def free_bytes(self) -> float:
        return self._capacity - self._used

    def lookup(self, data: IntervalSet) -> IntervalSet:
        return data & self.content

    def partition(self, data: IntervalSet) -> tuple[IntervalSet, IntervalSet]:
        content = self.content
        if not content or not data:
            return _EMPTY, data
        hit = data & content
        return hit, data - hit

    # -- pins and fetches -------------------------------------------------------------------

    def _held(self, data: IntervalSet) -> IntervalSet:
        """Pins and fetches hold the whole files ``data`` touches."""
        return self.space.whole_files(data)

    # -- changing the content ---------------------------------------------------------------

    def touch(self, data: IntervalSet, stamp: float) -> None:
        """Record that ``data`` was read at ``stamp`` (refreshes the keys of its files)."""
        self.refresh(data, stamp)

    def refresh(self, hit: IntervalSet, stamp: float) -> None:
        touch = self.replacement.key_on_touch
        for i in self.space.files_in(hit):
            entry = self._keys.get(i)
            if entry is None:
                continue
            key = touch(entry[0], stamp)
            if key != entry[0]:
                self._set_key(i, key)

    def insert(self, data: IntervalSet, stamp: float) -> tuple[IntervalSet, IntervalSet]:
        """Cache the files ``data`` touches, evicting as needed; returns ``(added, evicted)``.

        Files that cannot be made room for (everything else pinned, or larger than the
        whole cache) are not cached; the earliest files that fit are kept.
        """
        files = self.space.files
        wanted = self.space.files_in(data)
        new = []
        for i in wanted:
            if i in self._keys:
                self._set_key(i, self.replacement.key_on_touch(self._keys[i][0], stamp))
            else:
                new.append(i)
        if not new:
            return _EMPTY, _EMPTY
        need = sum(files[i].n_bytes for i in new)
        evicted: list[int] = []
        if need > self.free_bytes:
            protect = set(wanted)
            for pinned in self._pins.values():
                protect.update(self.space.files_in(pinned))
            evicted = self._evict(need - self.free_bytes, protect)
        added = []
        key = self.replacement.key_on_insert(stamp)
        for i in new:
            size = files[i].n_bytes
            if size > self.free_bytes:
                continue
            self._used += size
            self._set_key(i, key)
            added.append(i)
        self._content = None
        return self._events(added), self._events(evicted)

    def evict(self, data: IntervalSet) -> IntervalSet:
        """Drop the cached files ``data`` touches (pins are ignored: the caller knows)."""
        gone = [i for i in self.space.files_in(data) if i in self._keys]
        for i in gone:
            self._drop(i)
        return self._events(gone)

    def clear(self) -> IntervalSet:
        gone = self.content
        self._keys.clear()
        self._heap.clear()
        self._used = 0.0
        self._content = _EMPTY
        return gone

    # -- internals --------------------------------------------------------------------------

    def _events(self, indices: list[int]) -> IntervalSet:
        files = self.space.files
        return IntervalSet((files[i].start, files[i].stop) for i in indices)

    def _set_key(self, i: int, key: float) -> None:
        seq = next(self._seq)
        self._keys[i] = (key, seq)
        heapq.heappush(self._heap, (key, seq, i))
        if len(self._heap) > 2 * len(self._keys) + 1024:
            # Stale entries leave only through evictions: rebuilt, one entry a file.
            self._heap = [(k, s, f) for f, (k, s) in self._keys.items()]
            heapq.heapify(self._heap)

    def _drop(self, i: int) -> None:
        del self._keys[i]
        self._used -= self.space.files[i].n_bytes
        self._content = None

    def _evict(self, need: float, protect: set[int]) -> list[int]:
        """Evict files, smallest key first, until ``need`` bytes are free."""
        evicted: list[int] = []
        deferred: list[tuple[float, int, int]] = []
        heap = self._heap
        while need > 0 and heap:
            entry = heapq.heappop(heap)
            key, seq, i = entry
            if self._keys.get(i) != (key, seq):
                continue  # stale: the file was refreshed or dropped since
            if i in protect:
                deferred.append(entry)
                continue
            need -= self.space.files[i].n_bytes
            self._drop(i)
            evicted.append(i)
        for entry in deferred:
            heapq.heappush(heap, entry)
        return sorted(evicted)
