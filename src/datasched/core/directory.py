"""The master's cluster-wide cache directory (ponce-hersch Table 2: "the scheduler maintains
... the state of all disk caches in the cluster").

A global sorted map from event range to the set of nodes holding it, so "who caches [a, b)"
costs a bisect and a walk over the overlapped segments, not a scan of every node (docs/design.md,
"Cheap").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from datasched.core.intervals import IntervalSet, cut_out, overlap_count, splice_in

try:
    import cython
except ImportError:  # Cython builds the hot path; without it, the sources run as they are
    import datasched.core.uncompiled as cython

__all__ = ["CacheDirectory"]

if not cython.compiled:
    # The sources search with the standard library. Compiled, ``_after`` and ``_before`` are
    # the C searches of core/search.pxd, cimported by this module's .pxd: the same answers.
    _after = bisect_right
    _before = bisect_left

_EMPTY = IntervalSet()
_NONE: frozenset[int] = frozenset()
_CHUNK = 256
_PRUNE_FLOOR = 4096
"""The interned holder sets are first pruned past this many (:meth:`CacheDirectory._prune`)."""
"""Half the most boundaries a chunk of the segment map holds (see CacheDirectory)."""


class CacheDirectory:
    """Which nodes cache which event ranges, for the whole cluster.

    Stored as sorted segment boundaries with one frozenset of holders per segment (a segment
    runs from its boundary to the next; the last runs to infinity and is empty). Neighbouring
    segments with equal holders are merged, so the map stays as small as the cached data is
    fragmented. Per-node contents are also kept as IntervalSets for "what does node n hold of
    this job".

    The boundaries are kept in chunks of at most ``2 * _CHUNK`` (``_bounds[c]``, with
    ``_holders[c]`` beside them and ``_firsts[c]`` the chunk's first boundary): a 1,000-node
    cluster's caches make a map of 10^5 segments, where inserting a boundary into one flat list
    moved the whole list's tail on every cache change and grew with the cluster
    (docs/performance.md, "Cost per event as the cluster grows"). A chunk costs a bisect over
    the chunks' first boundaries and a short insert; the map's contents, and so every answer,
    are the same as a flat list's.
    """

    __slots__ = (
        "_bounds",
        "_content",
        "_firsts",
        "_holders",
        "_lengths",
        "_prune_at",
        "_sets",
        "_starts_of",
        "_stops_of",
    )

    def __init__(self, n_nodes: int) -> None:
        self._bounds: list[list[int]] = [[0]]
        self._holders: list[list[frozenset[int]]] = [[_NONE]]
        self._firsts: list[int] = [0]
        self._sets: dict[frozenset[int], frozenset[int]] = {_NONE: _NONE}
        """Every set of holders the map has held, each kept once: segments with the same
        holders share one frozenset (a 1,000-node map holds 10^5 segments or more, and a
        frozenset costs 216 bytes; docs/performance.md, "The constant factor"). Sets no
        segment holds any more are dropped when it doubles (:meth:`_prune`)."""
        self._prune_at = _PRUNE_FLOOR
        # Each node's content as two lists changed in place (a range spliced in or out: a
        # bisect and a short move), not an IntervalSet rebuilt, lists copied, on every cache
        # change; the IntervalSet is made when asked for and kept until the next change.
        self._starts_of: list[list[int]] = [[] for _ in range(n_nodes)]
        self._stops_of: list[list[int]] = [[] for _ in range(n_nodes)]
        self._lengths: list[int] = [0] * n_nodes
        self._content: list[IntervalSet | None] = [_EMPTY] * n_nodes

    def add_node(self) -> int:
        """Make room for one more node (numbered next); returns its number."""
        self._starts_of.append([])
        self._stops_of.append([])
        self._lengths.append(0)
        self._content.append(_EMPTY)
        return len(self._content) - 1

    def clear(self, node: int) -> IntervalSet:
        """Forget everything ``node`` caches; returns what it held."""
        gone = self.content(node)
        self.remove(node, gone)
        return gone

    def content(self, node: int) -> IntervalSet:
        """Everything ``node`` caches."""
        content = self._content[node]
        if content is None:
            content = IntervalSet._make(
                self._starts_of[node].copy(), self._stops_of[node].copy(), self._lengths[node]
            )
            self._content[node] = content
        return content

    def cached_on(self, node: int, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that ``node`` caches."""
        return data & self.content(node)

    def cached_length(self, node: int, data: IntervalSet) -> int:
        """How many events of ``data`` ``node`` caches (``data.overlap_length`` of the
        content, from the lists: hot in the master's cost estimates)."""
        starts = self._starts_of[node]
        if not starts:
            return 0
        return overlap_count(starts, self._stops_of[node], data._starts, data._stops)

    def covers(self, node: int, data: IntervalSet) -> bool:
        """Whether ``node`` caches every event of ``data`` (``data.issubset`` of the
        content, from the lists)."""
        if not data:
            return True
        if data.length > self._lengths[node]:
            return False
        starts, stops = self._starts_of[node], self._stops_of[node]
        t0, t1 = data._starts, data._stops
        # The content's ranges neither overlap nor touch: each of data's lies inside one.
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

    def add(self, node: int, data: IntervalSet) -> None:
        if not data:
            return
        starts, stops = self._starts_of[node], self._stops_of[node]
        t0, t1 = data._starts, data._stops
        # Merged with the ranges each overlaps or touches (as ``IntervalSet.union``).
        self._lengths[node] = splice_in(starts, stops, t0, t1, self._lengths[node])
        self._content[node] = None
        for k in range(len(t0)):
            self._update(t0[k], t1[k], node, add=True)
        if len(self._sets) > self._prune_at:
            self._prune()

    def remove(self, node: int, data: IntervalSet) -> None:
        if not data:
            return
        starts, stops = self._starts_of[node], self._stops_of[node]
        length = cut_out(starts, stops, data._starts, data._stops, self._lengths[node])
        self._lengths[node] = length
        self._content[node] = None
        t0, t1 = data._starts, data._stops
        for k in range(len(t0)):
            self._update(t0[k], t1[k], node, add=False)
        if len(self._sets) > self._prune_at:
            self._prune()

    def holders(self, start: int, stop: int) -> list[tuple[int, int, frozenset[int]]]:
        """Segments of ``[start, stop)`` as ``(a, b, nodes holding [a, b))``, in order."""
        if start >= stop:
            return []
        c, j = self._seek(start)
        bounds, holders = self._bounds, self._holders
        # Built from slices (C speed: a job meets tens of segments where the caches are
        # fragmented); only the first segment's start and the last one's end are clipped.
        cb = bounds[c]
        k = _before(cb, stop, j)
        starts = cb[j:k]
        nodes = holders[c][j:k]
        while k == len(cb) and c + 1 < len(bounds):
            c += 1
            cb = bounds[c]
            k = _before(cb, stop)
            starts += cb[:k]
            nodes += holders[c][:k]
        ends = starts[1:]
        ends.append(stop)
        out = list(zip(starts, ends, nodes, strict=True))
        a, b, first = out[0]
        if a < start:
            out[0] = (start, b, first)
        return out

    def by_node(self, data: IntervalSet) -> dict[int, IntervalSet]:
        """``data`` split by holder: node -> the part of ``data`` it caches (nodes in order)."""
        parts: dict[int, list[tuple[int, int]]] = {}
        for start, stop in data:
            for a, b, nodes in self.holders(start, stop):
                for n in nodes:
                    parts.setdefault(n, []).append((a, b))
        return {n: IntervalSet(parts[n]) for n in sorted(parts)}

    def _prune(self) -> None:
        """Keep in :attr:`_sets` only the sets some segment holds. A long run meets ever new
        sets of holders (a 1,000-node cluster's out-of-order run: 40,000 more in three CPU
        minutes) while each segment holds one; kept all, they grow without bound. Run when
        the table doubles, so its cost (a pass over the segments) is shared by as many new
        sets as it keeps; the segments keep their objects, so nothing else changes."""
        live = {h: h for ch in self._holders for h in ch}
        live[_NONE] = _NONE
        self._sets = live
        self._prune_at = max(_PRUNE_FLOOR, 2 * len(live))

    @property
    def n_segments(self) -> int:
        return sum(len(cb) for cb in self._bounds)

    def check(self) -> None:
        """Raise ValueError unless the segment map is exactly what the nodes' contents make:
        chunks sorted, non-empty and indexed by their first boundary, equal neighbours merged,
        and each segment's holders the nodes whose content covers it (a recomputation from
        the contents, O(cached extents); ``Scheduler.validate`` calls it)."""
        if len(self._firsts) != len(self._bounds) or len(self._bounds) != len(self._holders):
            raise ValueError("cache directory: chunk lists differ in length")
        flat_b: list[int] = []
        flat_h: list[frozenset[int]] = []
        for c, (cb, ch) in enumerate(zip(self._bounds, self._holders, strict=True)):
            if not cb or len(cb) != len(ch) or self._firsts[c] != cb[0]:
                raise ValueError(f"cache directory: chunk {c} is empty or mis-indexed")
            flat_b += cb
            flat_h += ch
        # Recompute: every content boundary, then the holders of each elementary piece.
        contents = [self.content(node) for node in range(len(self._content))]
        for node, ranges in enumerate(contents):
            if ranges != IntervalSet(ranges) or ranges.length != sum(b - a for a, b in ranges):
                raise ValueError(f"cache directory: node {node}'s content is malformed")
        points = sorted({p for ranges in contents for ab in ranges for p in ab} | {0})
        cover: dict[int, set[int]] = {p: set() for p in points}
        for node, ranges in enumerate(contents):
            for a, b in ranges:
                for p in points[bisect_left(points, a) : bisect_left(points, b)]:
                    cover[p].add(node)
        want_b: list[int] = []
        want_h: list[frozenset[int]] = []
        for p in points:
            h = frozenset(cover[p])
            if not want_h or want_h[-1] != h:
                want_b.append(p)
                want_h.append(h)
        if flat_b != want_b or flat_h != want_h:
            raise ValueError(
                f"cache directory: the segment map ({len(flat_b)} segments) is not what the "
                f"nodes' contents make ({len(want_b)} segments)"
            )
        if any(self._sets.get(h) is not h for h in flat_h):
            raise ValueError("cache directory: a segment's holders are not the interned set")

    def _seek(self, point: int) -> tuple[int, int]:
        """Chunk and index of the segment containing ``point``."""
        c = max(_after(self._firsts, point) - 1, 0)
        return c, max(_after(self._bounds[c], point) - 1, 0)

    def _cut(self, point: int) -> None:
        """Make ``point`` a boundary."""
        c = max(_after(self._firsts, point) - 1, 0)
        cb = self._bounds[c]
        i = _before(cb, point)
        if i < len(cb) and cb[i] == point:
            return
        ch = self._holders[c]
        cb.insert(i, point)
        ch.insert(i, ch[i - 1])
        if len(cb) > 2 * _CHUNK:
            self._bounds[c + 1 : c + 1] = [cb[_CHUNK:]]
            self._holders[c + 1 : c + 1] = [ch[_CHUNK:]]
            self._firsts.insert(c + 1, cb[_CHUNK])
            del cb[_CHUNK:], ch[_CHUNK:]

    def _delete(self, point: int) -> None:
        """Remove the boundary ``point`` (the segment before it extends over its segment)."""
        c, i = self._seek(point)
        cb = self._bounds[c]
        del cb[i], self._holders[c][i]
        if not cb:
            del self._bounds[c], self._holders[c], self._firsts[c]
        elif i == 0:
            self._firsts[c] = cb[0]

    def _update(self, a: int, b: int, node: int, add: bool) -> None:
        """Add ``node`` to (or remove it from) the holders of ``[a, b)``, merging equal
        neighbours. Where ``[a, b)`` and the segment before it lie in one chunk (nearly
        always), in one pass over that chunk's slice: both cuts, the changed holders and
        the merge (the map is the one :meth:`_update_across` makes; this runs on every
        cache change, docs/performance.md, "The constant factor")."""
        firsts = self._firsts
        c = max(_after(firsts, a) - 1, 0)
        if c + 1 < len(firsts) and firsts[c + 1] <= b:
            self._update_across(a, b, node, add=add)
            return
        cb = self._bounds[c]
        ch = self._holders[c]
        i = _before(cb, a)
        if i == 0 and c > 0:
            self._update_across(a, b, node, add=add)  # the segment before is another chunk's
            return
        n = len(cb)
        at = i < n and cb[i] == a
        s = i if at else i - 1
        if s + 1 == n or b <= cb[s + 1]:
            self._update_within(cb, ch, s, at, a, b, node, add)
            if len(cb) > 2 * _CHUNK:
                self._bounds[c + 1 : c + 1] = [cb[_CHUNK:]]
                self._holders[c + 1 : c + 1] = [ch[_CHUNK:]]
                firsts.insert(c + 1, cb[_CHUNK])
                del cb[_CHUNK:], ch[_CHUNK:]
            return
        if i == n or cb[i] != a:
            cb.insert(i, a)
            ch.insert(i, ch[i - 1])
        j = _before(cb, b, i)
        if j == len(cb) or cb[j] != b:
            cb.insert(j, b)
            ch.insert(j, ch[j - 1])
        one = {node}
        sets = self._sets
        lo = i - 1 if i > 0 else 0
        # The boundaries lo..j (inclusive), those inside [a, b) with their holders changed,
        # less every one whose holders equal the segment's before it.
        keep_b = [cb[lo]]
        prev = ch[lo]
        if lo == i:
            prev = ch[lo] | one if add else ch[lo] - one
            prev = sets.setdefault(prev, prev)
        keep_h = [prev]
        for k in range(lo + 1, j + 1):
            h = ch[k]
            if k < j:
                h = h | one if add else h - one
                h = sets.setdefault(h, h)
            if h != prev:
                keep_b.append(cb[k])
                keep_h.append(h)
                prev = h
        cb[lo : j + 1] = keep_b
        ch[lo : j + 1] = keep_h
        if len(cb) > 2 * _CHUNK:
            self._bounds[c + 1 : c + 1] = [cb[_CHUNK:]]
            self._holders[c + 1 : c + 1] = [ch[_CHUNK:]]
            firsts.insert(c + 1, cb[_CHUNK])
            del cb[_CHUNK:], ch[_CHUNK:]

    def _update_within(
        self,
        cb: list[int],
        ch: list[frozenset[int]],
        s: int,
        at: bool,
        a: int,
        b: int,
        node: int,
        add: bool,
    ) -> None:
        """:meth:`_update` where ``[a, b)`` lies inside the segment ``s`` of the chunk
        ``cb``/``ch`` (``at``: it starts where the segment does; the next boundary, if in
        the chunk, is at ``b`` or after): the common case of a range read and cached, or
        evicted, as one piece. The segment is cut and merged with its neighbours directly,
        to the map :meth:`_update`'s general pass makes (neighbours never hold equal sets,
        so only the changed piece can merge, and only with the segment before or after)."""
        h = ch[s]
        moved = h | {node} if add else h - {node}
        if moved == h:
            return
        moved = self._sets.setdefault(moved, moved)
        whole = s + 1 < len(cb) and cb[s + 1] == b
        if not at:
            # [cb[s], a) keeps ``h``; [a, b) gets ``moved``; then ``h`` again up to the next
            # boundary, or the next segment, which may equal ``moved``.
            if not whole:
                cb[s + 1 : s + 1] = (a, b)
                ch[s + 1 : s + 1] = (moved, h)
            elif ch[s + 1] == moved:
                cb[s + 1] = a
            else:
                cb.insert(s + 1, a)
                ch.insert(s + 1, moved)
            return
        before = ch[s - 1] if s > 0 else None
        if whole:
            after = ch[s + 1]
            if before == moved and after == moved:
                del cb[s : s + 2], ch[s : s + 2]
            elif before == moved:
                del cb[s], ch[s]
            elif after == moved:
                del cb[s + 1], ch[s + 1]
                ch[s] = moved
            else:
                ch[s] = moved
        elif before == moved:
            cb[s] = b  # the segment before runs on to ``b``
        else:
            ch[s] = moved
            cb.insert(s + 1, b)
            ch.insert(s + 1, h)

    def _update_across(self, a: int, b: int, node: int, *, add: bool) -> None:
        """:meth:`_update` where ``[a, b)`` or the segment before it crosses chunks."""
        self._cut(a)
        self._cut(b)
        bounds, holders = self._bounds, self._holders
        c, i = self._seek(a)
        # Start one segment before ``a`` (to merge with it), and walk to the segment after
        # the one starting at ``b``, changing the holders of those inside ``[a, b)``.
        if i > 0:
            i -= 1
        elif c > 0:
            c -= 1
            i = len(bounds[c]) - 1
        span: list[tuple[int, frozenset[int]]] = []
        past = 0
        while c < len(bounds):
            cb, ch = bounds[c], holders[c]
            while i < len(cb):
                x = cb[i]
                if a <= x < b:
                    h = ch[i] | {node} if add else ch[i] - {node}
                    ch[i] = self._sets.setdefault(h, h)
                elif x >= b:
                    past += 1
                span.append((x, ch[i]))
                if past == 2:
                    break
                i += 1
            if past == 2:
                break
            c += 1
            i = 0
        # Merge equal neighbours around the touched span.
        current = span[0][1]
        for x, h in span[1:]:
            if h == current:
                self._delete(x)
            else:
                current = h
