"""Cache state: one node's disk cache, and the master's cluster-wide cache directory.

:class:`NodeCache` is what one node holds: a byte budget (counted in events), cached event
ranges with a replacement key each (LRU by default, pluggable), pins on ranges being read, and
fetches in flight. Engines keep one per node as the truth; the simulator fills it as data is
read, the runtime's worker plugin mirrors it on disk.

:class:`CacheDirectory` is the master's view of all caches (ponce-hersch Table 2: "the scheduler
maintains ... the state of all disk caches in the cluster"): a global sorted map from event
range to the set of nodes holding it, so "who caches [a, b)" costs a bisect and a walk over the
overlapped segments, not a scan of every node (DESIGN.md, "Cheap").
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Protocol

from datasched.core.intervals import IntervalSet

__all__ = ["FIFO", "LRU", "CacheDirectory", "NodeCache", "Replacement"]

_EMPTY = IntervalSet()


class Replacement(Protocol):
    """How a cached range's replacement key is set; the range with the smallest key goes first."""

    name: str

    def key_on_insert(self, stamp: float) -> float:
        """Key of a range inserted at time ``stamp``."""
        ...

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        """Key of a cached range read again at time ``stamp``."""
        ...


class _LRU:
    """Least recently used: reading a range refreshes it (ponce-hersch Table 2)."""

    name = "lru"

    def key_on_insert(self, stamp: float) -> float:
        return stamp

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        return stamp


class _FIFO:
    """First in, first out: reading a range does not refresh it."""

    name = "fifo"

    def key_on_insert(self, stamp: float) -> float:
        return stamp

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        return old_key


LRU: Replacement = _LRU()
FIFO: Replacement = _FIFO()


class NodeCache:
    """The disk cache of one node, in events, with replacement over cached ranges.

    Cached data is kept as disjoint extents ``[start, stop)`` in sorted parallel lists, each with
    a replacement key and a sequence number; a heap of ``(key, seq, start, stop)`` finds the
    victim, lazily. Every extent has an entry in the heap that sorts no later than its own
    ``(key, seq)``: an entry naming no extent any more is skipped when it reaches the top, one
    naming an extent whose key has grown since (a refresh, which pushes nothing: refreshes are
    far more frequent than evictions) is pushed again with the extent's key, and one that
    matches is the victim. The order of eviction is the one a heap updated on every refresh
    would give. Pinned ranges (being read) are never evicted; a fetch in flight holds no space
    until it completes (:meth:`end_fetch`), when what was really read is inserted.
    """

    __slots__ = (
        "_content",
        "_fetch_ids",
        "_fetches",
        "_heap",
        "_keys",
        "_pin_ids",
        "_pins",
        "_seq",
        "_seqs",
        "_starts",
        "_stops",
        "_used",
        "capacity_events",
        "replacement",
    )

    def __init__(self, capacity_events: int, replacement: Replacement = LRU) -> None:
        if capacity_events < 0:
            raise ValueError(f"capacity_events: must not be negative, got {capacity_events!r}")
        self.capacity_events = capacity_events
        self.replacement = replacement
        self._starts: list[int] = []
        self._stops: list[int] = []
        self._keys: list[float] = []
        self._seqs: list[int] = []
        """Per extent, the sequence number of its replacement key (ties go to the lower)."""
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = itertools.count()
        self._content: IntervalSet | None = _EMPTY
        self._used = 0
        self._pins: dict[int, IntervalSet] = {}
        self._pin_ids = itertools.count()
        self._fetches: dict[int, IntervalSet] = {}
        self._fetch_ids = itertools.count()

    # -- reading the state ------------------------------------------------------------------

    @property
    def content(self) -> IntervalSet:
        """Every cached event (built from the extents when asked, kept until they change)."""
        if self._content is None:
            self._content = IntervalSet.from_sorted(zip(self._starts, self._stops, strict=True))
        return self._content

    @property
    def used_events(self) -> int:
        return self._used

    @property
    def free_events(self) -> int:
        return self.capacity_events - self._used

    @property
    def pinned(self) -> IntervalSet:
        """Events that may not be evicted now."""
        out = _EMPTY
        for data in self._pins.values():
            out = out | data
        return out

    @property
    def in_flight(self) -> IntervalSet:
        """Events being fetched into this cache."""
        out = _EMPTY
        for data in self._fetches.values():
            out = out | data
        return out

    def lookup(self, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that is cached here.

        Answered from the extent lists with bisect, so a lookup costs the log of the number of
        extents plus the extents it meets, not a copy of the whole content.
        """
        return self.partition(data)[0]

    def partition(self, data: IntervalSet) -> tuple[IntervalSet, IntervalSet]:
        """``(cached, rest)``: the part of ``data`` cached here and the part that is not, in
        one walk over the extents (what :meth:`lookup` and a difference would give)."""
        starts, stops = self._starts, self._stops
        if not starts or not data:
            return _EMPTY, data
        hit_starts: list[int] = []
        hit_stops: list[int] = []
        gap_starts: list[int] = []
        gap_stops: list[int] = []
        n = len(starts)
        for a, b in data:
            cur = a
            i = bisect_right(stops, a)
            while i < n and starts[i] < b:
                lo = starts[i] if starts[i] > a else a
                hi = stops[i] if stops[i] < b else b
                if lo > cur:
                    gap_starts.append(cur)
                    gap_stops.append(lo)
                hit_starts.append(lo)
                hit_stops.append(hi)
                cur = hi
                i += 1
            if cur < b:
                gap_starts.append(cur)
                gap_stops.append(b)
        if not hit_starts:
            return _EMPTY, data
        if not gap_starts:
            return data, _EMPTY
        # Gaps neither touch nor overlap (cached pieces or gaps between ``data``'s ranges
        # separate them); cached pieces of neighbouring extents may touch.
        return (
            IntervalSet.from_sorted(zip(hit_starts, hit_stops, strict=True)),
            IntervalSet._make(gap_starts, gap_stops),
        )

    def extents(self) -> Iterator[tuple[int, int, float]]:
        """Cached extents as ``(start, stop, key)``, in event order."""
        return zip(self._starts, self._stops, self._keys, strict=True)

    # -- pins and fetches ---------------------------------------------------------------------

    def pin(self, data: IntervalSet) -> int:
        """Protect ``data`` from eviction until :meth:`unpin` with the returned token."""
        token = next(self._pin_ids)
        self._pins[token] = data
        return token

    def unpin(self, token: int) -> None:
        del self._pins[token]

    def begin_fetch(self, data: IntervalSet) -> int:
        """Note that ``data`` is being read into this cache; returns a token for end_fetch."""
        token = next(self._fetch_ids)
        self._fetches[token] = data
        return token

    def end_fetch(
        self, token: int, completed: IntervalSet, stamp: float
    ) -> tuple[IntervalSet, IntervalSet]:
        """Finish a fetch: ``completed`` (of what was fetched) is inserted, the rest dropped."""
        fetched = self._fetches.pop(token)
        return self.insert(completed & fetched, stamp)

    # -- changing the content -----------------------------------------------------------------

    def touch(self, data: IntervalSet, stamp: float) -> None:
        """Record that ``data`` was read at ``stamp`` (refreshes LRU keys of cached parts)."""
        self.refresh(self.lookup(data), stamp)

    def refresh(self, hit: IntervalSet, stamp: float) -> None:
        """:meth:`touch` for data known to be cached whole (read under a pin): no lookup."""
        starts, stops, keys = self._starts, self._stops, self._keys
        touch = self.replacement.key_on_touch
        lru = self.replacement is LRU  # its key is the stamp: no call per extent
        for a, b in hit:
            lo = bisect_right(stops, a)
            hi = bisect_left(starts, b)
            if lo + 1 == hi:
                key = stamp if lru else touch(keys[lo], stamp)
                if key == keys[lo]:
                    continue  # one extent, key unchanged (FIFO): nothing to do
                if key > keys[lo] and starts[lo] == a and stops[lo] == b:
                    # Exactly one extent whose key grows (LRU, the common case): only
                    # recorded; its older heap entry stands for it (see the class).
                    keys[lo] = key
                    self._seqs[lo] = next(self._seq)
                    continue
                new_keys = {key}
            else:
                new_keys = {touch(keys[i], stamp) for i in range(lo, hi)}
            if len(new_keys) == 1:
                # Every extent of [a, b) gets the same key (LRU): one extent replaces them,
                # instead of updating and merging them one by one. They tile [a, b), since
                # ``hit`` is cached whole; the first and last may stick out of it.
                (key,) = new_keys
                new_starts, new_stops, kept = [a], [b], [key]
                if starts[lo] < a:
                    new_starts.insert(0, starts[lo])
                    new_stops.insert(0, a)
                    kept.insert(0, keys[lo])
                if stops[hi - 1] > b:
                    new_starts.append(b)
                    new_stops.append(stops[hi - 1])
                    kept.append(keys[hi - 1])
                starts[lo:hi] = new_starts
                stops[lo:hi] = new_stops
                keys[lo:hi] = kept
                self._seqs[lo:hi] = [0] * len(kept)  # set by the pushes below
                for i in range(lo, lo + len(kept)):
                    self._push(i)
                continue
            self._split_at(a)
            self._split_at(b)
            lo = bisect_left(self._starts, a)
            hi = bisect_left(self._starts, b)
            for i in range(lo, hi):
                key = self.replacement.key_on_touch(self._keys[i], stamp)
                if key != self._keys[i]:
                    self._keys[i] = key
                    self._push(i)
            self._coalesce(lo, hi)

    def insert(self, data: IntervalSet, stamp: float) -> tuple[IntervalSet, IntervalSet]:
        """Cache ``data`` read at ``stamp``, evicting as needed; returns ``(added, evicted)``.

        What cannot be made room for (everything else pinned) is not cached: the earliest events
        of ``data`` that fit are kept.
        """
        hit, new = self.partition(data)
        if hit:
            self.refresh(hit, stamp)
        if not new:
            return _EMPTY, _EMPTY
        evicted = _EMPTY
        if new.length > self.free_events:
            evicted = self._evict(new.length - self.free_events, protect=self.pinned | data)
        if new.length > self.free_events:
            new, _ = new.head(self.free_events)
            if not new:
                return _EMPTY, evicted
        key = self.replacement.key_on_insert(stamp)
        for a, b in new:
            i = bisect_left(self._starts, a)
            self._starts.insert(i, a)
            self._stops.insert(i, b)
            self._keys.insert(i, key)
            self._seqs.insert(i, 0)
            self._push(i)
        self._used += new.length
        self._content = None
        return new, evicted

    def evict(self, data: IntervalSet) -> IntervalSet:
        """Drop ``data`` from the cache (pins are ignored: the caller knows); returns what went."""
        gone = self.lookup(data)
        for a, b in gone:
            self._remove_range(a, b)
        return gone

    def clear(self) -> IntervalSet:
        """Drop everything; returns what was cached."""
        gone = self.content
        self._starts.clear()
        self._stops.clear()
        self._keys.clear()
        self._seqs.clear()
        self._heap.clear()
        self._content = _EMPTY
        self._used = 0
        return gone

    # -- internals ----------------------------------------------------------------------------

    def _push(self, i: int) -> None:
        seq = next(self._seq)
        self._seqs[i] = seq
        heap = self._heap
        heapq.heappush(heap, (self._keys[i], seq, self._starts[i], self._stops[i]))
        if len(heap) > 2 * len(self._starts) + 1024:
            # Stale entries leave only through evictions: a cache that never fills (a
            # long-running worker's) would grow its heap with every split and merge. Rebuilt
            # from the extents, one entry each, it stays O(extents), amortised O(1) a push.
            heap[:] = zip(self._keys, self._seqs, self._starts, self._stops, strict=True)
            heapq.heapify(heap)

    def _split_at(self, point: int) -> None:
        """Cut the extent containing ``point`` in its interior into two."""
        i = bisect_right(self._starts, point) - 1
        if i < 0 or not (self._starts[i] < point < self._stops[i]):
            return
        stop = self._stops[i]
        self._stops[i] = point
        self._starts.insert(i + 1, point)
        self._stops.insert(i + 1, stop)
        self._keys.insert(i + 1, self._keys[i])
        self._seqs.insert(i + 1, 0)
        self._push(i)
        self._push(i + 1)

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge touching extents with equal keys among indices [lo, hi)."""
        i = lo
        while i + 1 < hi and i + 1 < len(self._starts):
            if self._stops[i] == self._starts[i + 1] and self._keys[i] == self._keys[i + 1]:
                self._stops[i] = self._stops[i + 1]
                del self._starts[i + 1], self._stops[i + 1], self._keys[i + 1], self._seqs[i + 1]
                hi -= 1
                self._push(i)
            else:
                i += 1

    def _remove_range(self, a: int, b: int) -> None:
        self._split_at(a)
        self._split_at(b)
        lo = bisect_left(self._starts, a)
        hi = bisect_left(self._starts, b)
        removed = 0
        for i in range(lo, hi):
            removed += self._stops[i] - self._starts[i]
        del self._starts[lo:hi], self._stops[lo:hi], self._keys[lo:hi], self._seqs[lo:hi]
        self._used -= removed
        self._content = None

    def _extent(self, start: int, stop: int) -> int:
        """The index of the extent ``[start, stop)``, or -1 if there is none."""
        i = bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start and self._stops[i] == stop:
            return i
        return -1

    def _evict(self, need: int, protect: IntervalSet) -> IntervalSet:
        """Evict whole extents, smallest key first, until ``need`` events are free.

        Whole cached segments go, as in ponce-hersch Table 2 ("deallocates the least recently
        used cached segments"): cutting extents to the exact need would shred the cache into
        slivers. The unprotected part of a partly protected extent goes; the rest stays.
        """
        evicted: list[tuple[int, int]] = []
        deferred: list[tuple[float, int, int, int]] = []
        heap = self._heap
        while need > 0 and heap:
            entry = heapq.heappop(heap)
            key, seq, start, stop = entry
            i = self._extent(start, stop)
            if i < 0:
                continue  # split, merged or gone since: the extents it became have entries
            if self._keys[i] != key or self._seqs[i] != seq:
                # Refreshed since (a key only grows between pushes): enter it as it is now.
                heapq.heappush(heap, (self._keys[i], self._seqs[i], start, stop))
                continue
            if not protect.clip(start, stop):
                # The whole extent goes (the common case): no cutting needed.
                del self._starts[i], self._stops[i], self._keys[i], self._seqs[i]
                self._used -= stop - start
                self._content = None
                evicted.append((start, stop))
                need -= stop - start
                continue
            free = IntervalSet.range(start, stop) - protect
            if not free:
                deferred.append(entry)
                continue
            for a, b in free:
                self._remove_range(a, b)
                evicted.append((a, b))
                need -= b - a
        for entry in deferred:
            heapq.heappush(heap, entry)
        evicted.sort()  # whole extents or parts of them: disjoint, in eviction order
        return IntervalSet.from_sorted(evicted)


class CacheDirectory:
    """Which nodes cache which event ranges, for the whole cluster.

    Stored as sorted segment boundaries ``_bounds`` with one frozenset of holders per segment
    (segment ``i`` is ``[_bounds[i], _bounds[i+1])``; the last runs to infinity and is empty).
    Neighbouring segments with equal holders are merged, so the map stays as small as the
    cached data is fragmented. Per-node contents are also kept as IntervalSets for "what does
    node n hold of this job".
    """

    __slots__ = ("_bounds", "_content", "_holders")

    def __init__(self, n_nodes: int) -> None:
        self._bounds: list[int] = [0]
        self._holders: list[frozenset[int]] = [frozenset()]
        self._content: list[IntervalSet] = [_EMPTY] * n_nodes

    def content(self, node: int) -> IntervalSet:
        """Everything ``node`` caches."""
        return self._content[node]

    def cached_on(self, node: int, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that ``node`` caches."""
        return data & self._content[node]

    def cached_length(self, node: int, data: IntervalSet) -> int:
        """How many events of ``data`` ``node`` caches."""
        return data.overlap_length(self._content[node])

    def add(self, node: int, data: IntervalSet) -> None:
        if not data:
            return
        self._content[node] = self._content[node] | data
        for a, b in data:
            self._update(a, b, node, add=True)

    def remove(self, node: int, data: IntervalSet) -> None:
        if not data:
            return
        self._content[node] = self._content[node] - data
        for a, b in data:
            self._update(a, b, node, add=False)

    def holders(self, start: int, stop: int) -> list[tuple[int, int, frozenset[int]]]:
        """Segments of ``[start, stop)`` as ``(a, b, nodes holding [a, b))``, in order."""
        if start >= stop:
            return []
        bounds = self._bounds
        i = max(bisect_right(bounds, start) - 1, 0)
        j = bisect_left(bounds, stop, i)  # segments i .. j-1 meet [start, stop)
        if j <= i:
            return []
        # Built from slices (C speed: a job meets tens of segments where the caches are
        # fragmented); only the first segment's start and the last one's end are clipped.
        ends = bounds[i + 1 : j]
        ends.append(stop)
        out = list(zip(bounds[i:j], ends, self._holders[i:j], strict=True))
        a, b, nodes = out[0]
        if a < start:
            out[0] = (start, b, nodes)
        return out

    def by_node(self, data: IntervalSet) -> dict[int, IntervalSet]:
        """``data`` split by holder: node -> the part of ``data`` it caches (nodes in order)."""
        parts: dict[int, list[tuple[int, int]]] = {}
        for start, stop in data:
            for a, b, nodes in self.holders(start, stop):
                for n in nodes:
                    parts.setdefault(n, []).append((a, b))
        return {n: IntervalSet(parts[n]) for n in sorted(parts)}

    @property
    def n_segments(self) -> int:
        return len(self._bounds)

    def _cut(self, point: int) -> int:
        """Make ``point`` a boundary; returns its index."""
        bounds = self._bounds
        i = bisect_left(bounds, point)
        if i < len(bounds) and bounds[i] == point:
            return i
        bounds.insert(i, point)
        self._holders.insert(i, self._holders[i - 1])
        return i

    def _update(self, a: int, b: int, node: int, *, add: bool) -> None:
        lo = self._cut(a)
        hi = self._cut(b)
        holders = self._holders
        for i in range(lo, hi):
            holders[i] = holders[i] | {node} if add else holders[i] - {node}
        # Merge equal neighbours around the touched span.
        i = max(lo - 1, 0)
        stop = min(hi + 1, len(self._bounds) - 1)
        while i < stop:
            if holders[i] == holders[i + 1]:
                del self._bounds[i + 1], holders[i + 1]
                stop -= 1
            else:
                i += 1
