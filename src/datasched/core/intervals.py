"""IntervalSet: sets of collision events as sorted, disjoint half-open ranges.

Events are numbered 0..N-1 (docs/design.md, "The data model"); a job's data, a subjob's data, a
cache's content are all IntervalSets. Immutable and hashable. No trees: most sets hold one to five
ranges (caches thousands) and the simulator calls these on its hot path. Single ranges take fast
paths; a small operand's ranges are spliced into a copy of the other's lists with ``bisect`` and
slice assignment (C speed: a memmove of pointers, not a rebuilt list); else the lists are merged.

Length: one concept, the event set and its algebra. Each operation is written out with its
fast paths (one range, a few ranges spliced, a merge), its loops by index over bounds read into
locals, so that the compiled build runs them over C integers (core/intervals.pxd; a ``zip``
called with a keyword costs as much as a short loop): longer than a generic merge, and the
simulator's hottest code.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator

try:
    import cython
except ImportError:  # Cython builds the hot path; without it, the sources run as they are
    import datasched.core.uncompiled as cython

__all__ = ["IntervalSet", "cut_out", "joined", "overlap_count", "splice_in"]

if not cython.compiled:
    # The sources search with the standard library. Compiled, ``_after`` and ``_before`` are
    # the C searches of core/search.pxd, cimported by this module's .pxd: the same answers.
    _after = bisect_right
    _before = bisect_left


def cut_out(
    starts: list[int], stops: list[int], cut_starts: list[int], cut_stops: list[int], length: int
) -> int:
    """Cut the sorted, disjoint ranges ``cut_starts[i], cut_stops[i]`` out of the sorted,
    disjoint ranges ``starts``/``stops``, in place (a splice per range: cheap when few ranges
    are cut from many); returns ``length`` (the events of ``starts``/``stops`` before) less the
    events cut. Shared by ``IntervalSet.difference`` and the cache directory's per-node lists."""
    # Loops by index, values read into locals: compiled, C integers (core/intervals.pxd).
    for k in range(len(cut_starts)):
        a = cut_starts[k]
        b = cut_stops[k]
        lo = _after(stops, a)
        hi = _before(starts, b)
        if lo >= hi:
            continue
        for m in range(lo, hi):
            x = stops[m]
            y = starts[m]
            length -= x - y
        first = starts[lo]
        last = stops[hi - 1]
        kept_starts = []
        kept_stops = []
        if first < a:
            kept_starts.append(first)
            kept_stops.append(a)
            length += a - first
        if last > b:
            kept_starts.append(b)
            kept_stops.append(last)
            length += last - b
        starts[lo:hi] = kept_starts
        stops[lo:hi] = kept_stops
    return length


def splice_in(
    starts: list[int], stops: list[int], add_starts: list[int], add_stops: list[int], length: int
) -> int:
    """Merge the sorted, disjoint ranges ``add_starts[i], add_stops[i]`` into the sorted,
    disjoint ranges ``starts``/``stops``, in place (each spliced over the ranges it overlaps or
    touches: cheap when few ranges join many); returns ``length`` (the events of
    ``starts``/``stops`` before) plus the events added. :func:`cut_out`'s inverse, shared by
    ``IntervalSet.union`` and the cache directory's per-node lists."""
    for k in range(len(add_starts)):
        a = add_starts[k]
        b = add_stops[k]
        lo = _before(stops, a)
        hi = _after(starts, b)
        if lo < hi:
            c = starts[lo]
            d = stops[hi - 1]
            if c < a:
                a = c
            if d > b:
                b = d
            for m in range(lo, hi):
                c = starts[m]
                d = stops[m]
                length -= d - c
        length += b - a
        starts[lo:hi] = (a,)
        stops[lo:hi] = (b,)
    return length


def overlap_count(starts: list[int], stops: list[int], t0: list[int], t1: list[int]) -> int:
    """How many events of the sorted, disjoint ranges ``t0[i], t1[i]`` the sorted, disjoint
    ranges ``starts``/``stops`` hold, one search a range of ``t0``/``t1`` (give it the fewer):
    ``IntervalSet.overlap_length``, and the cache directory's count over a node's lists."""
    total = 0
    for k in range(len(t0)):
        a = t0[k]
        b = t1[k]
        lo = _after(stops, a)
        hi = _before(starts, b)
        if lo >= hi:
            continue
        c = starts[lo]
        d = stops[hi - 1]
        if hi - lo == 1:
            total += (d if d < b else b) - (c if c > a else a)
            continue
        # Many ranges (a subjob over a fragmented cache): summed, less the overhang of the
        # first and the last, the only ones that can stick out.
        if c < a:
            total -= a - c
        if d > b:
            total -= d - b
        for m in range(lo, hi):
            c = starts[m]
            d = stops[m]
            total += d - c
    return total


def _new(starts: list[int], stops: list[int], length: int) -> IntervalSet:
    """A set of lists meeting the invariant, unchecked, with its count of events: how this
    module's operations build their results (``IntervalSet._make`` for other modules). Compiled,
    a C function filling the extension type's fields."""
    # Not object.__new__: compiled, IntervalSet is an extension type (core/intervals.pxd),
    # which object.__new__ refuses; for the source's class the two are the same call.
    obj = IntervalSet.__new__(IntervalSet)
    obj._starts = starts
    obj._stops = stops
    obj.length = length
    obj._hash = None
    return obj


def joined(starts: list[int], stops: list[int]) -> IntervalSet:
    """``IntervalSet.from_sorted`` of the ranges ``starts[i], stops[i]`` (non-empty, disjoint,
    ascending; touching ones merged), read from two lists without a pair built for each
    (a range cache's lookup, hot)."""
    out_starts: list[int] = []
    out_stops: list[int] = []
    n = 0
    last = 0
    for k in range(len(starts)):
        a = starts[k]
        b = stops[k]
        if n and a == last:
            out_stops[n - 1] = b
        else:
            out_starts.append(a)
            out_stops.append(b)
            n += 1
        last = b
    return _new(out_starts, out_stops, sum(out_stops) - sum(out_starts))


class IntervalSet:
    """An immutable set of integers stored as sorted, disjoint, non-adjacent ``[start, stop)``."""

    __slots__ = ("_hash", "_starts", "_stops", "length")

    _starts: list[int]
    _stops: list[int]
    length: int
    """How many events. A plain attribute, set once when the set is built (never assign
    it): the simulator reads it several times per event, and a property costs a function
    call each time (docs/performance.md, "The plain Ponce policies' constant factor")."""
    _hash: int | None

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        items = []
        for pair in ranges:
            a, b = pair
            if not (isinstance(a, int) and isinstance(b, int)):
                raise ValueError(f"range {pair!r}: bounds must be integers")
            if a > b:
                raise ValueError(f"range {pair!r}: start is after stop")
            if a < b:
                items.append((a, b))
        items.sort()
        starts: list[int] = []
        stops: list[int] = []
        for a, b in items:
            if stops and a <= stops[-1]:
                if b > stops[-1]:
                    stops[-1] = b
            else:
                starts.append(a)
                stops.append(b)
        self._starts = starts
        self._stops = stops
        self.length = sum(stops) - sum(starts)
        self._hash = None

    @classmethod
    def _make(cls, starts: list[int], stops: list[int], length: int = -1) -> IntervalSet:
        """Build from lists meeting the invariant, unchecked; ``length``: the count, if known."""
        return _new(starts, stops, length if length >= 0 else sum(stops) - sum(starts))

    @classmethod
    def from_sorted(cls, ranges: Iterable[tuple[int, int]]) -> IntervalSet:
        """Build from non-empty, disjoint, ascending ranges (touching ones merged), unchecked."""
        starts: list[int] = []
        stops: list[int] = []
        for a, b in ranges:
            if stops and a == stops[-1]:
                stops[-1] = b
            else:
                starts.append(a)
                stops.append(b)
        return _new(starts, stops, sum(stops) - sum(starts))

    @classmethod
    def range(cls, start: int, stop: int) -> IntervalSet:
        """The events ``start, ..., stop - 1``."""
        if start > stop:
            raise ValueError(f"range ({start}, {stop}): start is after stop")
        if start == stop:
            return _new([], [], 0)
        return _new([start], [stop], stop - start)

    @classmethod
    def empty(cls) -> IntervalSet:
        """The set of no events."""
        return _new([], [], 0)

    @classmethod
    def from_events(cls, events: Iterable[int]) -> IntervalSet:
        """The set of the given individual events."""
        return cls((e, e + 1) for e in events)

    # -- reading ------------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        """Whether the set holds no event (the same as ``not self``)."""
        return not self._starts

    def __bool__(self) -> bool:
        return bool(self._starts)

    @property
    def n_ranges(self) -> int:
        """How many maximal ``[start, stop)`` ranges (a measure of fragmentation)."""
        return len(self._starts)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The maximal ranges ``(start, stop)``, ascending."""
        return tuple(zip(self._starts, self._stops, strict=True))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        # Not strict: the two lists are of one length by the invariant, and a zip called
        # with a keyword costs twice as much (compiled, hot: sets are walked at every event).
        return zip(self._starts, self._stops)  # noqa: B905

    @property
    def start(self) -> int:
        """The first event."""
        if not self._starts:
            raise ValueError("an empty IntervalSet has no start")
        return self._starts[0]

    @property
    def stop(self) -> int:
        """One past the last event."""
        if not self._stops:
            raise ValueError("an empty IntervalSet has no stop")
        return self._stops[-1]

    def __contains__(self, event: object) -> bool:
        if not isinstance(event, int):
            return False
        i = bisect_right(self._starts, event) - 1
        return i >= 0 and event < self._stops[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._starts == other._starts and self._stops == other._stops

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((tuple(self._starts), tuple(self._stops)))
        return self._hash

    def __repr__(self) -> str:
        return f"IntervalSet({list(self)!r})"

    def __reduce__(
        self,
    ) -> tuple[Callable[[list[int], list[int]], IntervalSet], tuple[list[int], list[int]]]:
        # By a function of this module, not the class's state: the same pickle from the
        # compiled build and the pure one, each loading the other's (datasched/_compiled.py).
        return _from_lists, (self._starts, self._stops)

    # -- set algebra (fast paths, splicing, merging: see the module docstring) ----------------
    # Each operator calls its named method, whose locals the compiled build types as C integers
    # (core/intervals.pxd: a C method, its loops by index over values read into locals). The
    # merges of two large sets keep their bounds as Python objects (names left untyped there):
    # compared with a C integer, each would be converted at every step.
    def __or__(self, other: IntervalSet) -> IntervalSet:
        """The events in either set."""
        return self.union(other)

    def union(self, other: IntervalSet) -> IntervalSet:
        """The events in either set (``|``)."""
        s0, s1, o0, o1 = self._starts, self._stops, other._starts, other._stops
        if not o0:
            return self
        if not s0:
            return other
        if len(s0) == 1 and len(o0) == 1:
            a = s0[0]
            b = s1[0]
            c = o0[0]
            d = o1[0]
            if b < c:
                return _new([a, c], [b, d], b - a + d - c)
            if d < a:
                return _new([c, a], [d, b], b - a + d - c)
            if a <= c and d <= b:
                return self
            if c <= a and b <= d:
                return other
            lo = a if a < c else c
            hi = b if b > d else d
            return _new([lo], [hi], hi - lo)
        big, small = (self, other) if len(s0) >= len(o0) else (other, self)
        t0, t1 = small._starts, small._stops
        if len(t0) <= _SMALL:
            # One copy of the big lists, then each small range spliced in place.
            starts = big._starts.copy()
            stops = big._stops.copy()
            return _new(starts, stops, splice_in(starts, stops, t0, t1, big.length))
        starts = []
        stops = []
        i = j = 0
        na, nb = len(s0), len(o0)
        while i < na or j < nb:
            if j >= nb or (i < na and s0[i] <= o0[j]):
                s, e = s0[i], s1[i]
                i += 1
            else:
                s, e = o0[j], o1[j]
                j += 1
            if stops and s <= stops[-1]:
                if e > stops[-1]:
                    stops[-1] = e
            else:
                starts.append(s)
                stops.append(e)
        return _new(starts, stops, sum(stops) - sum(starts))

    def __and__(self, other: IntervalSet) -> IntervalSet:
        """The events in both sets."""
        return self.intersection(other)

    def intersection(self, other: IntervalSet) -> IntervalSet:
        """The events in both sets (``&``)."""
        s0, s1, o0, o1 = self._starts, self._stops, other._starts, other._stops
        if not s0 or not o0:
            return _EMPTY
        if len(o0) == 1:
            if len(s0) == 1:
                a = s0[0]
                b = s1[0]
                c = o0[0]
                d = o1[0]
                if c <= a and b <= d:
                    return self
                if a <= c and d <= b:
                    return other
                lo = a if a > c else c
                hi = b if b < d else d
                return _new([lo], [hi], hi - lo) if lo < hi else _EMPTY
            return self.clip(o0[0], o1[0])
        if len(s0) == 1:
            return other.clip(s0[0], s1[0])
        big, small = (self, other) if len(s0) >= len(o0) else (other, self)
        t0, t1 = small._starts, small._stops
        if len(t0) <= _SMALL:
            starts = []
            stops = []
            length = 0
            for k in range(len(t0)):
                part = big.clip(t0[k], t1[k])
                starts.extend(part._starts)
                stops.extend(part._stops)
                length += part.length
            return _new(starts, stops, length)
        starts = []
        stops = []
        i = j = 0
        na, nb = len(s0), len(o0)
        while i < na and j < nb:
            s = s0[i] if s0[i] > o0[j] else o0[j]
            e = s1[i] if s1[i] < o1[j] else o1[j]
            if s < e:
                starts.append(s)
                stops.append(e)
            if s1[i] < o1[j]:
                i += 1
            else:
                j += 1
        return _new(starts, stops, sum(stops) - sum(starts))

    def __sub__(self, other: IntervalSet) -> IntervalSet:
        """The events of this set that are not in ``other``."""
        return self.difference(other)

    def difference(self, other: IntervalSet) -> IntervalSet:
        """The events of this set that are not in ``other`` (``-``)."""
        s0, s1, o0, o1 = self._starts, self._stops, other._starts, other._stops
        n = len(s0)
        m = len(o0)
        if n == 0 or m == 0:
            return self
        a = s0[0]
        b = s1[n - 1]
        c = o0[0]
        d = o1[m - 1]
        if c >= b or d <= a:
            return self
        if n == 1 and m == 1:
            # The two overlap (checked above): what is left is a piece before and one after.
            if a < c:
                if d < b:
                    return _new([a, d], [c, b], c - a + b - d)
                return _new([a], [c], c - a)
            if d < b:
                return _new([d], [b], b - d)
            return _EMPTY
        if m <= _SMALL or m * _SMALL <= n:
            # Splice (as in ``|``), also when ``other`` is small next to us (cache evictions).
            starts = s0.copy()
            stops = s1.copy()
            return _new(starts, stops, cut_out(starts, stops, o0, o1, self.length))
        if n <= _SMALL:
            # Each of our few ranges minus the part of ``other`` inside it.
            starts = []
            stops = []
            for k in range(n):
                for a, b in other.gaps(s0[k], s1[k]):
                    starts.append(a)
                    stops.append(b)
            return _new(starts, stops, sum(stops) - sum(starts))
        starts = []
        stops = []
        j = 0
        for s, e in zip(s0, s1, strict=True):
            cur = s
            while j < m and o1[j] <= cur:
                j += 1
            i = j
            while i < m and o0[i] < e:
                if o0[i] > cur:
                    starts.append(cur)
                    stops.append(o0[i])
                if o1[i] > cur:
                    cur = o1[i]
                if cur >= e:
                    break
                i += 1
            if cur < e:
                starts.append(cur)
                stops.append(e)
        return _new(starts, stops, sum(stops) - sum(starts))

    def overlaps(self, other: IntervalSet) -> bool:
        """Whether the two sets share an event (without building the intersection)."""
        if not self._starts or not other._starts:
            return False
        big, small = (self, other) if len(self._starts) >= len(other._starts) else (other, self)
        starts, stops = big._starts, big._stops
        t0, t1 = small._starts, small._stops
        n = len(starts)
        a = t0[0]
        b = t1[len(t1) - 1]
        c = starts[0]
        d = stops[n - 1]
        if a >= d or b <= c:
            return False
        for k in range(len(t0)):
            a = t0[k]
            i = _after(stops, a)  # the first range of ``big`` that ends after ``a``
            if i < n:
                c = starts[i]
                b = t1[k]
                if c < b:
                    return True
        return False

    def overlaps_each(self, others: list[IntervalSet]) -> list[bool]:
        """``[o.overlaps(self) for o in others]`` in one call: a few small sets tested against
        this large one (cache-oriented splitting's split choice asks it of a node's cache for
        every running subjob: at 10 nodes a call each cost about as much as the tests)."""
        starts, stops = self._starts, self._stops
        n = len(starts)
        if n == 0:
            return [False] * len(others)
        first = starts[0]
        last = stops[n - 1]
        out = []
        for other in others:
            hit = False
            t0, t1 = other._starts, other._stops
            m = len(t0)
            if m:
                a = t0[0]
                b = t1[m - 1]
                if a < last and b > first:
                    for k in range(m):  # most subjobs: one range
                        a = t0[k]
                        i = _after(stops, a)  # our first range ending after ``a``
                        if i == n:
                            break  # ``a`` and what follows lie past our last range
                        c = starts[i]
                        b = t1[k]
                        if c < b:
                            hit = True
                            break
            out.append(hit)
        return out

    def issubset(self, other: IntervalSet) -> bool:
        """Whether every event of this set is in ``other`` (without building the difference)."""
        if not self._starts:
            return True
        if self.length > other.length:
            return False
        starts, stops = other._starts, other._stops
        t0, t1 = self._starts, self._stops
        # ``other``'s ranges neither overlap nor touch, so each of our ranges must lie inside one.
        for k in range(len(t0)):
            a = t0[k]
            i = _after(starts, a) - 1
            if i < 0:
                return False
            b = t1[k]
            d = stops[i]
            if d < b:
                return False
        return True

    def overlap_length(self, other: IntervalSet) -> int:
        """``len(self & other)`` without building it (hot in the master's cost estimates)."""
        if not self._starts or not other._starts:
            return 0
        small, big = (self, other) if len(self._starts) <= len(other._starts) else (other, self)
        return overlap_count(big._starts, big._stops, small._starts, small._stops)

    def clip(self, start: int, stop: int) -> IntervalSet:
        """The events of this set within ``[start, stop)``."""
        s0, s1 = self._starts, self._stops
        n = len(s0)
        if n == 0 or start >= stop:
            return _EMPTY
        a = s0[0]
        b = s1[n - 1]
        if start >= b or stop <= a:
            return _EMPTY
        if start <= a and stop >= b:
            return self
        lo = _after(s1, start)
        hi = _before(s0, stop)
        starts = s0[lo:hi]
        stops = s1[lo:hi]
        length = 0
        for k in range(hi - lo):
            a = starts[k]
            b = stops[k]
            if a < start:
                a = start
                starts[k] = a
            if b > stop:
                b = stop
                stops[k] = b
            length += b - a
        return _new(starts, stops, length)

    def gaps(self, start: int, stop: int) -> list[tuple[int, int]]:
        """``range(start, stop) - self`` as ascending pairs, without building a set (hot)."""
        out = []
        part = self.clip(start, stop)
        t0, t1 = part._starts, part._stops
        for k in range(len(t0)):
            a = t0[k]
            if a > start:
                out.append((start, a))
            start = t1[k]
        if start < stop:
            out.append((start, stop))
        return out

    # -- cutting ------------------------------------------------------------------------------
    def split_at(self, point: int) -> tuple[IntervalSet, IntervalSet]:
        """Events before ``point``, and from ``point`` on."""
        if not self._starts:
            return self, self
        if point <= self._starts[0]:
            return _EMPTY, self
        if point >= self._stops[-1]:
            return self, _EMPTY
        return self.clip(self._starts[0], point), self.clip(point, self._stops[-1])

    def event_at(self, k: int) -> int:
        """The ``k``-th event (0-based) in ascending order."""
        if k < 0 or k >= self.length:
            raise IndexError(f"event index {k} out of range for {self.length} events")
        for s, e in zip(self._starts, self._stops, strict=True):
            if k < e - s:
                return s + k
            k -= e - s
        raise AssertionError("unreachable")

    def head(self, n: int) -> tuple[IntervalSet, IntervalSet]:
        """The first ``n`` events and the rest."""
        if n <= 0:
            return _EMPTY, self
        length = self.length
        if n >= length:
            return self, _EMPTY
        s0, s1 = self._starts, self._stops
        a = s0[0]
        if len(s0) == 1:
            return _new([a], [a + n], n), _new([a + n], [s1[0]], length - n)
        i = 0
        left = n
        b = s1[0]
        while left >= b - a:
            left -= b - a
            i += 1
            a = s0[i]
            b = s1[i]
        if left == 0:
            return _new(s0[:i], s1[:i], n), _new(s0[i:], s1[i:], length - n)
        cut = a + left
        head_stops = s1[:i]
        head_stops.append(cut)
        rest_starts = s0[i + 1 :]
        rest_starts.insert(0, cut)
        return _new(s0[: i + 1], head_stops, n), _new(rest_starts, s1[i:], length - n)

    def drop(self, n: int) -> IntervalSet:
        """The events after the first ``n``: ``head(n)[1]``, without building the head (one
        set instead of two where only the rest is wanted: a split's cut, hot)."""
        if n <= 0:
            return self
        length = self.length
        if n >= length:
            return _EMPTY
        s0, s1 = self._starts, self._stops
        if len(s0) == 1:
            a = s0[0]
            return _new([a + n], [s1[0]], length - n)
        return self.head(n)[1]

    def split_even(self, parts: int, min_events: int = 1) -> list[IntervalSet]:
        """Consecutive pieces whose sizes differ by at most one, each >= ``min_events``
        (using fewer pieces if needed; at least one when non-empty)."""
        if parts < 1:
            raise ValueError(f"parts: must be positive, got {parts}")
        if min_events < 1:
            raise ValueError(f"min_events: must be positive, got {min_events}")
        n = self.length
        if n == 0:
            return []
        parts = max(1, min(parts, n // min_events))
        if parts == 1:
            return [self]
        size, extra = divmod(n, parts)  # the first ``extra`` pieces get one event more
        s0, s1 = self._starts, self._stops
        out = []
        i = 0
        pos = s0[0]  # the next event to hand out, in range ``i``
        for k in range(parts):
            piece_length = size + 1 if k < extra else size
            need = piece_length
            starts: list[int] = []
            stops: list[int] = []
            while need:
                end = s1[i]
                if end - pos > need:
                    starts.append(pos)
                    stops.append(pos + need)
                    pos += need
                    break
                starts.append(pos)
                stops.append(end)
                need -= end - pos
                i += 1
                if i < len(s0):
                    pos = s0[i]
            out.append(_new(starts, stops, piece_length))
        return out


def _from_lists(starts: list[int], stops: list[int]) -> IntervalSet:
    """An unpickled set (``IntervalSet.__reduce__``)."""
    return IntervalSet._make(list(starts), list(stops))


_EMPTY = IntervalSet._make([], [])
_SMALL = 8  # operands with at most this many ranges are spliced in by bisect
