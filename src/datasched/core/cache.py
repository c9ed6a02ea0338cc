"""Node caches: what one node's disk cache holds, in the grain of its data space.

A cache holds event ranges (:class:`RangeCache`, the model of ponce-hersch: any range may be
cached) or whole files (:class:`~datasched.core.filecache.FileCache`: real ROOT files, romosan,
STAR, the grid), with a byte budget, a replacement key per cached piece (LRU by default,
pluggable), pins on data being read, and fetches in flight. Engines keep one per node as the
truth (:func:`new_cache` picks the class the data space asks for); the simulator fills it as
data is read, the runtime's worker plugin mirrors it on disk. The master's view of every
cache is :class:`~datasched.core.directory.CacheDirectory`.
"""

from __future__ import annotations

import heapq
import itertools
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Protocol

from datasched.core.data import CacheGrain, DataSpace
from datasched.core.filecache import FileCache
from datasched.core.holds import Holds
from datasched.core.intervals import IntervalSet, joined
from datasched.core.replacement import LRU, Replacement

try:
    import cython
except ImportError:  # Cython builds the hot path; without it, the sources run as they are
    import datasched.core.uncompiled as cython

__all__ = ["NodeCache", "RangeCache", "new_cache"]

if not cython.compiled:
    # The sources search with the standard library. Compiled, ``_after`` and ``_before`` are
    # the C searches of core/search.pxd, cimported by this module's .pxd: the same answers.
    _after = bisect_right
    _before = bisect_left

_EMPTY = IntervalSet()

_START_BITS = 60
_SEQ_BITS = 56
_KEY_SHIFT = _START_BITS + _SEQ_BITS
_START_MASK = (1 << _START_BITS) - 1
_START_LIMIT = 1 << _START_BITS
"""No event at or past it can be cached (its start would not fit a heap entry)."""
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_PACK_D = struct.Struct("<d").pack
_UNPACK_Q = struct.Struct("<q").unpack
_FLIP = (1 << 63) - 1
_OFFSET = 1 << 63


def _order(key: float) -> int:
    """``key`` as an integer below 2**64 in the same order (the float's bits, negative
    floats' flipped; ``-0.0`` counts as ``0.0``, as a comparison of floats has it): an
    eviction heap entry is one integer, ``_order(key) << _KEY_SHIFT | seq << _START_BITS |
    start``, compared in C at the cost of one object (see RangeCache)."""
    bits: int
    if cython.compiled:
        # The float's bits read in C (compiled, ``bits`` is a C integer and ``_FLIP`` and
        # ``_OFFSET`` C constants, core/cache.pxd): the bits ``struct`` gives the sources.
        k = key + 0.0
        bits = cython.cast(cython.p_longlong, cython.address(k))[0]
    else:
        bits = _UNPACK_Q(_PACK_D(key + 0.0))[0]
    return (bits ^ _FLIP if bits < 0 else bits) + _OFFSET


class NodeCache(Protocol):
    """What engines need of a node's cache, whatever its grain. Every set is of events;
    sizes are in bytes."""

    @property
    def content(self) -> IntervalSet: ...
    @property
    def capacity_bytes(self) -> float: ...
    @property
    def used_bytes(self) -> float: ...
    @property
    def pinned(self) -> IntervalSet: ...
    @property
    def in_flight(self) -> IntervalSet: ...
    def lookup(self, data: IntervalSet) -> IntervalSet: ...
    def partition(self, data: IntervalSet) -> tuple[IntervalSet, IntervalSet]: ...
    def pin(self, data: IntervalSet) -> int: ...
    def unpin(self, token: int) -> None: ...
    def begin_fetch(self, data: IntervalSet) -> int: ...
    def end_fetch(
        self, token: int, completed: IntervalSet, stamp: float
    ) -> tuple[IntervalSet, IntervalSet]: ...
    def touch(self, data: IntervalSet, stamp: float) -> None: ...
    def refresh(self, hit: IntervalSet, stamp: float) -> None: ...
    def insert(self, data: IntervalSet, stamp: float) -> tuple[IntervalSet, IntervalSet]: ...
    def evict(self, data: IntervalSet) -> IntervalSet: ...
    def clear(self) -> IntervalSet: ...


def new_cache(space: DataSpace, capacity_bytes: float, replacement: Replacement = LRU) -> NodeCache:
    """An empty cache of ``capacity_bytes`` in the grain ``space`` asks for."""
    if space.grain is CacheGrain.FILE:
        return FileCache(space, capacity_bytes, replacement)
    density = space.uniform_bytes_per_event
    if density is None:
        raise ValueError(
            "grain: caching event ranges needs events of one size (cache whole files instead)"
        )
    return RangeCache(int(capacity_bytes // density), replacement, bytes_per_event=density)


class RangeCache(Holds):
    """The disk cache of one node holding event ranges, with replacement over them.

    Cached data is kept as disjoint extents ``[start, stop)`` in sorted parallel lists, each with
    a replacement key and a sequence number; a heap of ``(key, seq, start)`` finds the victim,
    lazily. Every extent has an entry in the heap at its start that sorts no later than its
    own ``(key, seq)``: an entry whose start begins no extent any more is skipped when it
    reaches the top, one whose extent has another sequence number since (its key grew in a
    refresh, which pushes nothing: refreshes are far more frequent than evictions; or it was
    cut or merged, and has its own entry) is pushed again with the extent's key and number,
    and one that matches is the victim. The order of eviction is the one a heap updated on
    every change would give: the extent of the smallest ``(key, seq)`` goes first (every
    change of an extent's bounds or key gives it a new sequence number, so the number alone
    says whether an entry is current). Pinned ranges (being read) are never evicted; a fetch
    in flight holds no space until it completes (:meth:`end_fetch`), when what was really read
    is inserted.

    Memory: a 1,000-node simulation keeps millions of extents (docs/performance.md, "Memory at
    the caches' steady state"), so their keys and sequence numbers are kept in arrays (8 bytes
    each, no object) and a heap entry is one integer, ``_order(key) << 116 | seq << 60 |
    start``, not a tuple of four (48 bytes where the tuple and the float and integer it alone
    held took 144). Events below 0 or past 2**60 are refused.
    """

    __slots__ = (
        "_content",
        "_heap",
        "_keys",
        "_seq",
        "_seqs",
        "_starts",
        "_stops",
        "_used",
        "bytes_per_event",
        "capacity_events",
        "replacement",
    )

    def __init__(
        self,
        capacity_events: int,
        replacement: Replacement = LRU,
        *,
        bytes_per_event: float = 1.0,
    ) -> None:
        if capacity_events < 0:
            raise ValueError(f"capacity_events: must not be negative, got {capacity_events!r}")
        self.capacity_events = capacity_events
        self.bytes_per_event = bytes_per_event
        self.replacement = replacement
        self._starts: list[int] = []
        self._stops: list[int] = []
        self._keys: array[float] = array("d")
        self._seqs: array[int] = array("q")
        """Per extent, the sequence number of its replacement key (ties go to the lower)."""
        self._heap: list[int] = []
        """Entries ``_order(key) << _KEY_SHIFT | seq << _START_BITS | start``."""
        self._seq = itertools.count()
        self._content: IntervalSet | None = _EMPTY
        self._used = 0
        self._init_holds()

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
    def capacity_bytes(self) -> float:
        return self.capacity_events * self.bytes_per_event

    @property
    def used_bytes(self) -> float:
        return self._used * self.bytes_per_event

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
        t0, t1 = data._starts, data._stops
        for k in range(len(t0)):
            # The extents lo..hi-1 overlap [a, b): the first may start before ``a`` and the
            # last end after ``b``; those between are hits whole, with a gap wherever two of
            # them do not touch (slices, not a walk extent by extent: a subjob on a warm
            # cache meets tens of extents; docs/performance.md, "Cost per event as the
            # cluster grows"). By index, bounds read into locals: compiled, C integers.
            a = t0[k]
            b = t1[k]
            lo = _after(stops, a)
            hi = _before(starts, b, lo)
            if lo == hi:
                gap_starts.append(a)
                gap_stops.append(b)
                continue
            first = starts[lo]
            if first > a:
                gap_starts.append(a)
                gap_stops.append(first)
            else:
                first = a
            last = stops[hi - 1]
            if hi - lo == 1:
                hit_starts.append(first)
                hit_stops.append(last if last < b else b)
            else:
                hit_starts.append(first)
                hit_starts += starts[lo + 1 : hi]
                inner = stops[lo : hi - 1]
                hit_stops += inner
                hit_stops.append(last if last < b else b)
                for m in range(lo + 1, hi):
                    e = stops[m - 1]
                    s = starts[m]
                    if e < s:
                        gap_starts.append(e)
                        gap_stops.append(s)
            if last < b:
                gap_starts.append(last)
                gap_stops.append(b)
        if not hit_starts:
            return _EMPTY, data
        if not gap_starts:
            return data, _EMPTY
        # Gaps neither touch nor overlap (cached pieces or gaps between ``data``'s ranges
        # separate them); cached pieces of neighbouring extents may touch.
        return (
            joined(hit_starts, hit_stops),
            IntervalSet._make(gap_starts, gap_stops),
        )

    def extents(self) -> Iterator[tuple[int, int, float]]:
        """Cached extents as ``(start, stop, key)``, in event order."""
        return zip(self._starts, self._stops, self._keys, strict=True)

    # -- changing the content -----------------------------------------------------------------

    def touch(self, data: IntervalSet, stamp: float) -> None:
        """Record that ``data`` was read at ``stamp`` (refreshes LRU keys of cached parts)."""
        self.refresh(self.lookup(data), stamp)

    def refresh(self, hit: IntervalSet, stamp: float) -> None:
        """:meth:`touch` for data known to be cached whole (read under a pin): no lookup."""
        starts, stops, keys = self._starts, self._stops, self._keys
        touch = self.replacement.key_on_touch
        lru = self.replacement is LRU  # its key is the stamp: no call per extent
        t0, t1 = hit._starts, hit._stops
        for j in range(len(t0)):
            a = t0[j]
            b = t1[j]
            lo = _after(stops, a)
            hi = _before(starts, b)
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
                keys[lo:hi] = array("d", kept)
                self._seqs[lo:hi] = array("q", bytes(8 * len(kept)))  # set by the pushes below
                for i in range(lo, lo + len(kept)):
                    self._push(i)
                continue
            self._split_at(a)
            self._split_at(b)
            lo = _before(self._starts, a)
            hi = _before(self._starts, b)
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
        if data._stops and (data._stops[-1] > _START_LIMIT or data._starts[0] < 0):
            raise ValueError(f"data: only events 0 to 2**{_START_BITS} - 1 can be cached")
        hit, new = self.partition(data)
        if hit:
            self.refresh(hit, stamp)
        if not new:
            return _EMPTY, _EMPTY
        evicted = _EMPTY
        if new.length > self.free_events:
            evicted = self._evict(new.length - self.free_events, self.pinned | data)
        if new.length > self.free_events:
            new, _ = new.head(self.free_events)
            if not new:
                return _EMPTY, evicted
        key = self.replacement.key_on_insert(stamp)
        order = _order(key) << _KEY_SHIFT
        starts, stops, keys, seqs = self._starts, self._stops, self._keys, self._seqs
        heap, counter = self._heap, self._seq
        t0, t1 = new._starts, new._stops
        for k in range(len(t0)):
            # ``_push`` written out: this runs for every range a subjob brings in (by index:
            # a zip is a call with keywords).
            a = t0[k]
            b = t1[k]
            i = _before(starts, a)
            seq = next(counter)
            starts.insert(i, a)
            stops.insert(i, b)
            keys.insert(i, key)
            seqs.insert(i, seq)
            heapq.heappush(heap, order | seq << _START_BITS | a)
        if len(heap) > 2 * len(starts) + 1024:
            self._rebuild_heap()
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
        del self._keys[:]
        del self._seqs[:]
        self._heap.clear()
        self._content = _EMPTY
        self._used = 0
        return gone

    # -- internals ----------------------------------------------------------------------------

    def _push(self, i: int) -> None:
        seq = next(self._seq)
        self._seqs[i] = seq
        heap = self._heap
        entry = _order(self._keys[i]) << _KEY_SHIFT | seq << _START_BITS | self._starts[i]
        heapq.heappush(heap, entry)
        if len(heap) > 2 * len(self._starts) + 1024:
            self._rebuild_heap()

    def _entry(self, i: int) -> int:
        """The heap entry of extent ``i`` as it is now."""
        return _order(self._keys[i]) << _KEY_SHIFT | self._seqs[i] << _START_BITS | self._starts[i]

    def _rebuild_heap(self) -> None:
        """Stale entries leave only through evictions: a cache that never fills (a
        long-running worker's) would grow its heap with every split and merge. Rebuilt from
        the extents, one entry each, it stays O(extents), amortised O(1) a push."""
        heap = self._heap
        heap[:] = [
            _order(k) << _KEY_SHIFT | q << _START_BITS | a
            for k, q, a in zip(self._keys, self._seqs, self._starts, strict=True)
        ]
        heapq.heapify(heap)

    def _split_at(self, point: int) -> None:
        """Cut the extent containing ``point`` in its interior into two."""
        i = _after(self._starts, point) - 1
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
        lo = _before(self._starts, a)
        hi = _before(self._starts, b)
        removed = 0
        for i in range(lo, hi):
            removed += self._stops[i] - self._starts[i]
        del self._starts[lo:hi], self._stops[lo:hi], self._keys[lo:hi], self._seqs[lo:hi]
        self._used -= removed
        self._content = None

    def _evict(self, need: int, protect: IntervalSet) -> IntervalSet:
        """Evict whole extents, smallest key first, until ``need`` events are free.

        Whole cached segments go, as in ponce-hersch Table 2 ("deallocates the least recently
        used cached segments"): cutting extents to the exact need would shred the cache into
        slivers. The unprotected part of a partly protected extent goes; the rest stays.
        """
        evicted: list[tuple[int, int]] = []
        deferred: list[int] = []
        heap = self._heap
        starts, stops, seqs = self._starts, self._stops, self._seqs
        while need > 0 and heap:
            entry = heapq.heappop(heap)
            start = entry & _START_MASK
            i = _before(starts, start)
            if i == len(starts) or starts[i] != start:
                continue  # cut, merged or gone since: the extents it became have entries
            if seqs[i] != (entry >> _START_BITS) & _SEQ_MASK:
                # Refreshed since (a key only grows between pushes), or another extent
                # starts here now: enter it as it is now (at worst a second entry).
                heapq.heappush(heap, self._entry(i))
                continue
            stop = stops[i]
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
