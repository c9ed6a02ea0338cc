"""The master's cluster-wide cache directory (ponce-hersch Table 2: "the scheduler maintains
... the state of all disk caches in the cluster").

A global sorted map from event range to the set of nodes holding it, so "who caches [a, b)"
costs a bisect and a walk over the overlapped segments, not a scan of every node (docs/design.md,
"Cheap").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from datasched.core.intervals import IntervalSet

__all__ = ["CacheDirectory"]

_EMPTY = IntervalSet()


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

    def add_node(self) -> int:
        """Make room for one more node (numbered next); returns its number."""
        self._content.append(_EMPTY)
        return len(self._content) - 1

    def clear(self, node: int) -> IntervalSet:
        """Forget everything ``node`` caches; returns what it held."""
        gone = self._content[node]
        self.remove(node, gone)
        return gone

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
