"""IntervalSet: sets of collision events as sorted, disjoint half-open ranges.

Events are numbered 0..N-1 (docs/design.md, "The data model"); a job's data, a subjob's data, a
cache's content are all IntervalSets. Immutable and hashable. No trees: most sets hold one to five
ranges (caches thousands) and the simulator calls these on its hot path. Single ranges take fast
paths; a small operand's ranges are spliced into a copy of the other's lists with ``bisect`` and
slice assignment (C speed: a memmove of pointers, not a rebuilt list); else the lists are merged.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator

try:
    import cython
except ImportError:  # Cython builds the hot path; without it, the sources run as they are
    import datasched.core.uncompiled as cython

__all__ = ["IntervalSet", "cut_out"]

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
    events cut. Shared by ``IntervalSet.__sub__`` and the cache directory's per-node lists."""
    for a, b in zip(cut_starts, cut_stops, strict=True):
        lo = _after(stops, a)
        hi = _before(starts, b)
        if lo >= hi:
            continue
        length -= sum(stops[lo:hi]) - sum(starts[lo:hi]) if hi - lo > 1 else stops[lo] - starts[lo]
        kept_starts = []
        kept_stops = []
        if starts[lo] < a:
            kept_starts.append(starts[lo])
            kept_stops.append(a)
            length += a - starts[lo]
        if stops[hi - 1] > b:
            kept_starts.append(b)
            kept_stops.append(stops[hi - 1])
            length += stops[hi - 1] - b
        starts[lo:hi] = kept_starts
        stops[lo:hi] = kept_stops
    return length


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
        # Not object.__new__: compiled, IntervalSet is an extension type (core/intervals.pxd),
        # which object.__new__ refuses; for the source's class the two are the same call.
        obj = cls.__new__(cls)
        obj._starts = starts
        obj._stops = stops
        obj.length = length if length >= 0 else sum(stops) - sum(starts)
        obj._hash = None
        return obj

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
        return cls._make(starts, stops)

    @classmethod
    def range(cls, start: int, stop: int) -> IntervalSet:
        """The events ``start, ..., stop - 1``."""
        if start > stop:
            raise ValueError(f"range ({start}, {stop}): start is after stop")
        if start == stop:
            return cls._make([], [])
        return cls._make([start], [stop])

    @classmethod
    def empty(cls) -> IntervalSet:
        """The set of no events."""
        return cls._make([], [])

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
        return zip(self._starts, self._stops, strict=True)

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
    def __or__(self, other: IntervalSet) -> IntervalSet:
        """The events in either set."""
        if not other._starts:
            return self
        if not self._starts:
            return other
        if len(self._starts) == 1 and len(other._starts) == 1:
            a, b, c, d = self._starts[0], self._stops[0], other._starts[0], other._stops[0]
            if b < c:
                return IntervalSet._make([a, c], [b, d], b - a + d - c)
            if d < a:
                return IntervalSet._make([c, a], [d, b], b - a + d - c)
            if a <= c and d <= b:
                return self
            if c <= a and b <= d:
                return other
            lo = a if a < c else c
            hi = b if b > d else d
            return IntervalSet._make([lo], [hi], hi - lo)
        big, small = (self, other) if len(self._starts) >= len(other._starts) else (other, self)
        if len(small._starts) <= _SMALL:
            # One copy of the big lists, then each small range spliced in place.
            starts, stops = big._starts.copy(), big._stops.copy()
            length = big.length
            for a, b in zip(small._starts, small._stops, strict=True):
                lo = _before(stops, a)
                hi = _after(starts, b)
                if lo < hi:
                    a = min(a, starts[lo])
                    b = max(b, stops[hi - 1])
                    length -= sum(stops[lo:hi]) - sum(starts[lo:hi])
                length += b - a
                starts[lo:hi] = (a,)
                stops[lo:hi] = (b,)
            return IntervalSet._make(starts, stops, length)
        a0, a1, b0, b1 = self._starts, self._stops, other._starts, other._stops
        starts = []
        stops = []
        i = j = 0
        na, nb = len(a0), len(b0)
        while i < na or j < nb:
            if j >= nb or (i < na and a0[i] <= b0[j]):
                s, e = a0[i], a1[i]
                i += 1
            else:
                s, e = b0[j], b1[j]
                j += 1
            if stops and s <= stops[-1]:
                if e > stops[-1]:
                    stops[-1] = e
            else:
                starts.append(s)
                stops.append(e)
        return IntervalSet._make(starts, stops)

    union = __or__

    def __and__(self, other: IntervalSet) -> IntervalSet:
        """The events in both sets."""
        if not self._starts or not other._starts:
            return _EMPTY
        if len(other._starts) == 1:
            if len(self._starts) == 1:
                a, b, c, d = self._starts[0], self._stops[0], other._starts[0], other._stops[0]
                if c <= a and b <= d:
                    return self
                if a <= c and d <= b:
                    return other
                lo = a if a > c else c
                hi = b if b < d else d
                return IntervalSet._make([lo], [hi], hi - lo) if lo < hi else _EMPTY
            return self.clip(other._starts[0], other._stops[0])
        if len(self._starts) == 1:
            return other.clip(self._starts[0], self._stops[0])
        big, small = (self, other) if len(self._starts) >= len(other._starts) else (other, self)
        if len(small._starts) <= _SMALL:
            starts: list[int] = []
            stops: list[int] = []
            for a, b in zip(small._starts, small._stops, strict=True):
                part = big.clip(a, b)
                starts.extend(part._starts)
                stops.extend(part._stops)
            return IntervalSet._make(starts, stops)
        a0, a1, b0, b1 = self._starts, self._stops, other._starts, other._stops
        starts = []
        stops = []
        i = j = 0
        na, nb = len(a0), len(b0)
        while i < na and j < nb:
            s = a0[i] if a0[i] > b0[j] else b0[j]
            e = a1[i] if a1[i] < b1[j] else b1[j]
            if s < e:
                starts.append(s)
                stops.append(e)
            if a1[i] < b1[j]:
                i += 1
            else:
                j += 1
        return IntervalSet._make(starts, stops)

    intersection = __and__

    def __sub__(self, other: IntervalSet) -> IntervalSet:
        """The events of this set that are not in ``other``."""
        if not self._starts or not other._starts:
            return self
        if other._starts[0] >= self._stops[-1] or other._stops[-1] <= self._starts[0]:
            return self
        if len(self._starts) == 1 and len(other._starts) == 1:
            # The two overlap (checked above): what is left is a piece before and one after.
            a, b, c, d = self._starts[0], self._stops[0], other._starts[0], other._stops[0]
            if a < c:
                if d < b:
                    return IntervalSet._make([a, d], [c, b], c - a + b - d)
                return IntervalSet._make([a], [c], c - a)
            if d < b:
                return IntervalSet._make([d], [b], b - d)
            return _EMPTY
        if len(other._starts) <= _SMALL or len(other._starts) * _SMALL <= len(self._starts):
            # Splice (as in ``|``), also when ``other`` is small next to us (cache evictions).
            starts, stops = self._starts.copy(), self._stops.copy()
            length = cut_out(starts, stops, other._starts, other._stops, self.length)
            return IntervalSet._make(starts, stops, length)
        if len(self._starts) <= _SMALL:
            # Each of our few ranges minus the part of ``other`` inside it.
            starts = []
            stops = []
            for s, e in zip(self._starts, self._stops, strict=True):
                for a, b in other.gaps(s, e):
                    starts.append(a)
                    stops.append(b)
            return IntervalSet._make(starts, stops)
        a0, a1, b0, b1 = self._starts, self._stops, other._starts, other._stops
        starts = []
        stops = []
        j = 0
        nb = len(b0)
        for s, e in zip(a0, a1, strict=True):
            cur = s
            while j < nb and b1[j] <= cur:
                j += 1
            k = j
            while k < nb and b0[k] < e:
                if b0[k] > cur:
                    starts.append(cur)
                    stops.append(b0[k])
                if b1[k] > cur:
                    cur = b1[k]
                if cur >= e:
                    break
                k += 1
            if cur < e:
                starts.append(cur)
                stops.append(e)
        return IntervalSet._make(starts, stops)

    difference = __sub__

    def overlaps(self, other: IntervalSet) -> bool:
        """Whether the two sets share an event (without building the intersection)."""
        if not self._starts or not other._starts:
            return False
        big, small = (self, other) if len(self._starts) >= len(other._starts) else (other, self)
        starts, stops = big._starts, big._stops
        if small._starts[0] >= stops[-1] or small._stops[-1] <= starts[0]:
            return False
        n = len(starts)
        for a, b in zip(small._starts, small._stops, strict=True):
            i = _after(stops, a)  # the first range of ``big`` that ends after ``a``
            if i < n and starts[i] < b:
                return True
        return False

    def overlaps_each(self, others: list[IntervalSet]) -> list[bool]:
        """``[o.overlaps(self) for o in others]`` in one call: a few small sets tested against
        this large one (cache-oriented splitting's split choice asks it of a node's cache for
        every running subjob: at 10 nodes a call each cost about as much as the tests)."""
        starts, stops = self._starts, self._stops
        if not starts:
            return [False] * len(others)
        first, last = starts[0], stops[-1]
        n = len(starts)
        out = []
        for other in others:
            hit = False
            o_starts, o_stops = other._starts, other._stops
            if o_starts and o_starts[0] < last and o_stops[-1] > first:
                if len(o_starts) == 1:  # most subjobs: one range
                    i = _after(stops, o_starts[0])
                    hit = i < n and starts[i] < o_stops[0]
                else:
                    for a, b in zip(o_starts, o_stops, strict=True):
                        i = _after(stops, a)  # our first range ending after ``a``
                        if i == n:
                            break  # ``a`` and what follows lie past our last range
                        if starts[i] < b:
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
        # ``other``'s ranges neither overlap nor touch, so each of our ranges must lie inside one.
        for a, b in zip(self._starts, self._stops, strict=True):
            i = _after(starts, a) - 1
            if i < 0 or stops[i] < b:
                return False
        return True

    def overlap_length(self, other: IntervalSet) -> int:
        """``len(self & other)`` without building it (hot in the master's cost estimates)."""
        if not self._starts or not other._starts:
            return 0
        small, big = (self, other) if len(self._starts) <= len(other._starts) else (other, self)
        b0, b1 = big._starts, big._stops
        total = 0
        for a, b in zip(small._starts, small._stops, strict=True):
            lo = _after(b1, a)
            hi = _before(b0, b)
            if lo >= hi:
                continue
            if hi - lo == 1:
                s = b0[lo] if b0[lo] > a else a
                e = b1[lo] if b1[lo] < b else b
                total += e - s
                continue
            # Many ranges (a subjob over a fragmented cache): summed over slices, less the
            # overhang of the first and the last, the only ones that can stick out.
            total += sum(b1[lo:hi]) - sum(b0[lo:hi])
            if b0[lo] < a:
                total -= a - b0[lo]
            if b1[hi - 1] > b:
                total -= b1[hi - 1] - b
        return total

    def clip(self, start: int, stop: int) -> IntervalSet:
        """The events of this set within ``[start, stop)``."""
        s0, s1 = self._starts, self._stops
        if not s0 or start >= stop or start >= s1[-1] or stop <= s0[0]:
            return _EMPTY
        if start <= s0[0] and stop >= s1[-1]:
            return self
        lo = _after(s1, start)
        hi = _before(s0, stop)
        starts = s0[lo:hi]
        stops = s1[lo:hi]
        if starts:
            if starts[0] < start:
                starts[0] = start
            if stops[-1] > stop:
                stops[-1] = stop
        return IntervalSet._make(starts, stops)

    def gaps(self, start: int, stop: int) -> list[tuple[int, int]]:
        """``range(start, stop) - self`` as ascending pairs, without building a set (hot)."""
        out = []
        for a, b in self.clip(start, stop):
            if a > start:
                out.append((start, a))
            start = b
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
        if n >= self.length:
            return self, _EMPTY
        s0, s1 = self._starts, self._stops
        if len(s0) == 1:
            cut = s0[0] + n
            return (
                IntervalSet._make([s0[0]], [cut], n),
                IntervalSet._make([cut], [s1[0]], self.length - n),
            )
        left_length = n
        right_length = self.length - n
        i = 0
        while n >= s1[i] - s0[i]:
            n -= s1[i] - s0[i]
            i += 1
        if n == 0:
            return (
                IntervalSet._make(s0[:i], s1[:i], left_length),
                IntervalSet._make(s0[i:], s1[i:], right_length),
            )
        cut = s0[i] + n
        left = IntervalSet._make(s0[: i + 1], [*s1[:i], cut], left_length)
        right = IntervalSet._make([cut, *s0[i + 1 :]], s1[i:], right_length)
        return left, right

    def drop(self, n: int) -> IntervalSet:
        """The events after the first ``n``: ``head(n)[1]``, without building the head (one
        set instead of two where only the rest is wanted: a split's cut, hot)."""
        if n <= 0:
            return self
        if n >= self.length:
            return _EMPTY
        if len(self._starts) == 1:
            return IntervalSet._make([self._starts[0] + n], [self._stops[0]], self.length - n)
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
            out.append(IntervalSet._make(starts, stops, piece_length))
        return out


def _from_lists(starts: list[int], stops: list[int]) -> IntervalSet:
    """An unpickled set (``IntervalSet.__reduce__``)."""
    return IntervalSet._make(list(starts), list(stops))


_EMPTY = IntervalSet._make([], [])
_SMALL = 8  # operands with at most this many ranges are spliced in by bisect
