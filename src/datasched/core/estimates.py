"""The master's estimates and cutting rules, the part of the scheduler policies only read.

:class:`Estimates` is a base of :class:`~datasched.core.scheduler.Scheduler`: the time a
subjob would take on a slot (from where its data is cached), the running subjob estimated to
end last (a sorted list, ponce-hersch Table 5 scans every node), and where to cut a job (on file
boundaries when caches hold whole files).
"""

from __future__ import annotations

from bisect import bisect_left, insort

from datasched.core.data import DataSpace
from datasched.core.directory import CacheDirectory
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Topology
from datasched.core.policy import ReadMode
from datasched.core.splitindex import SplitIndex
from datasched.core.state import JobState, Running, SchedulerError, SubjobState

__all__ = ["Estimates"]

_RUNNING = SubjobState.RUNNING


class Estimates:
    """Estimates over the scheduler's state (see the module docstring)."""

    # Provided by the scheduler.
    now: float
    topology: Topology
    space: DataSpace
    cost: CostModel
    min_subjob_events: int
    running: dict[int, Running]
    jobs: dict[int, JobState]
    directory: CacheDirectory
    _reads: ReadMode
    slot_node: list[int]
    _rates: list[tuple[float, float, float]]
    """Per node: seconds per event from its cache, a peer's, tertiary storage (the data
    space's event size and the cost model's CPU time)."""
    _by_end: list[tuple[float, int, int]] | None
    """Running subjobs by estimated end, latest last: (end, -slot, -subjob id), sorted
    ascending, stale entries among them; built on the first question that needs it (policies
    that never ask do not keep it). Read from its tail, where stale entries are dropped with
    a pop: dropping them from the front moved the whole list each time."""
    fastest_s_per_event: float
    slowest_s_per_event: float
    _split_index: SplitIndex | None
    """The running subjobs by pace and by event range (cache-oriented splitting's split
    choice); built on the first question that needs it (None until then)."""

    def node_of(self, slot: int) -> int:
        return self.slot_node[slot]

    def s_per_event_on(
        self, slot: int, data: IntervalSet, cpu_s_per_event: float | None = None
    ) -> float:
        """The master's estimate of the mean time per event of ``data`` run on ``slot``
        (by a job of ``cpu_s_per_event``; the cost model's when None)."""
        n = data.length
        node = self.slot_node[slot]
        if cpu_s_per_event is None and self.space.uniform_bytes_per_event is not None:
            s_cache, s_peer, s_tertiary = self._rates[node]
        else:
            per_event = self.space.bytes_of(data) / n if n else self.space.bytes_per_event
            s_cache, s_peer, s_tertiary = self.topology.rates(
                node, self.cost, per_event, cpu_s_per_event
            )
        if n == 0:
            return s_cache
        reads = self._reads
        if not reads.cache_fill and not reads.peer_reads:
            return s_tertiary
        local = self.directory.cached_length(node, data)
        peer = 0
        if reads.peer_reads:
            for start, stop in data:
                for a, b, holders in self.directory.holders(start, stop):
                    if holders and node not in holders:
                        peer += b - a
        total = local * s_cache + peer * s_peer + (n - local - peer) * s_tertiary
        return total / n

    def read_rates(self, slot: int) -> tuple[float, float, float]:
        """Seconds per event on ``slot``'s node reading from its cache, a peer's, tertiary
        storage, at the cost model's CPU time: the rates :meth:`s_per_event_on` weighs when
        every event of the data space has the same size."""
        return self._rates[self.slot_node[slot]]

    def longest_running(self) -> int | None:
        """The slot whose subjob (not being stopped) is estimated to end last, the lowest
        slot on ties; None if every one is due. Reads the tail of a list sorted by
        estimated end, whose stale entries are dropped when they reach the tail
        (ponce-hersch Table 5 has job splitting scan all nodes here)."""
        order = self._by_end
        if order is None:
            order = self._end_heap()
        running = self.running
        while order:
            end, neg_slot, neg_id = order[-1]
            # ``_current`` written out (job splitting asks this at every freed slot, and
            # reads two to three entries each time).
            r = running.get(-neg_slot)
            if (
                r is not None
                and r.subjob.subjob_id == -neg_id
                and r.state is _RUNNING
                and r.end_s == end
            ):
                return -neg_slot if end > self.now else None
            order.pop()
        return None

    def _current(self, end: float, neg_slot: int, neg_id: int) -> bool:
        """Whether an entry of the by-end order still describes a subjob that may be asked to
        split: still running, settled, and with that estimated end (a shrunk one is entered
        again with its new end)."""
        r = self.running.get(-neg_slot)
        return r is not None and r.subjob.subjob_id == -neg_id and r.settled and r.end_s == end

    def _end_heap(self) -> list[tuple[float, int, int]]:
        """The by-end order, built from what runs now when first asked for."""
        if self._by_end is None:
            running = self.running.values()
            self._by_end = sorted((r.end_s, -r.slot, -r.subjob.subjob_id) for r in running)
        return self._by_end

    def _push_end(self, r: Running) -> None:
        """Enter ``r`` in the by-end order (a list sorted ascending: an insertion is a bisect
        and a move of the pointers after it, and a scan reads it from the tail without
        popping and pushing back). Entries of subjobs that ended before the longest are not
        removed when they end, so the list is rebuilt from its current entries whenever it
        holds more than twice what is running (plus a constant). A rebuild keeps at most one
        entry per running subjob (a shrink that released nothing enters a copy), so it is
        amortised O(1) per entry and the list stays O(slots) instead of growing with every
        subjob started."""
        if self._split_index is not None:
            self._split_index.add(r)
        order = self._by_end
        if order is None:
            return  # not asked for yet: built from ``running`` when it is
        insort(order, (r.end_s, -r.slot, -r.subjob.subjob_id))
        if len(order) > 2 * len(self.running) + 1024:
            self._rebuild_by_end(order)

    def _rebuild_by_end(self, order: list[tuple[float, int, int]]) -> None:
        """Keep the current entries of the by-end order, once each (apart from
        :meth:`_push_end`: compiled, that is a C method, which cannot hold a generator)."""
        order[:] = sorted(dict.fromkeys(e for e in order if self._current(*e)))

    def split_candidates(self, content: IntervalSet) -> tuple[list[int], list[int]]:
        """``(cached, leaders)``: the slots of every settled running subjob whose data shares
        an event with ``content`` (a node's cache), and the few others that may have the most
        events left at their pace (:meth:`SplitIndex.candidates
        <datasched.core.splitindex.SplitIndex.candidates>`): among subjobs of one pace with
        none of their data in ``content``, none but these can have more events left than
        these, or as many and a later estimated end. O(paces + candidates), not O(slots)."""
        index = self._split_index
        if index is None:
            index = self._split_index = SplitIndex(self.running)
        return index.candidates(self.running, self.jobs, self.now, content)

    def _validate_split_index(self) -> None:
        """The split index (once kept) agrees with what runs: ``SplitIndex.check``."""
        if self._split_index is not None:
            try:
                self._split_index.check(self.running)
            except ValueError as e:
                raise SchedulerError(f"validate: {e}") from None

    def balanced_share(self, slot: int, target: int, rest: IntervalSet) -> float:
        """Fraction of ``rest`` (what remains on ``slot``) to move to ``target`` so both end
        together."""
        keep_s = self.running[slot].s_per_event
        give_s = self.s_per_event_on(target, rest)
        return keep_s / (keep_s + give_s)

    def cut(self, data: IntervalSet, n: int) -> tuple[IntervalSet, IntervalSet]:
        """``data.head(n)``, with the cut moved to the nearest file boundary (when caches
        hold whole files) that is at most half the smaller part away and leaves both parts
        at least the minimal subjob. Without boundaries, exactly ``data.head(n)``."""
        length = data.length
        b = self.space.boundaries
        if not b or n <= 0 or n >= length:
            return data.head(n)
        slack = min(n, length - n) // 2
        lo, hi = data.event_at(max(n - slack, 0)), data.event_at(min(n + slack, length - 1))
        best, best_gap = n, slack + 1
        for j in range(bisect_left(b, lo), len(b)):
            if b[j] > hi:
                break
            k = data.split_at(b[j])[0].length
            gap = abs(k - n)
            fits = self.min_subjob_events <= k <= length - self.min_subjob_events
            if fits and gap < best_gap:
                best, best_gap = k, gap
        return data.head(best)

    def split_even(
        self, data: IntervalSet, parts: int, min_events: int | None = None
    ) -> list[IntervalSet]:
        """``data.split_even`` (pieces of at least ``min_events``, by default the minimal
        subjob), each cut moved by :meth:`cut` when there are boundaries."""
        minimum = self.min_subjob_events if min_events is None else min_events
        pieces = data.split_even(parts, minimum)
        if not self.space.boundaries or len(pieces) < 2:
            return pieces
        out = []
        rest = data
        for piece in pieces[:-1]:
            head, rest = self.cut(rest, piece.length)
            if head:
                out.append(head)
        if rest:
            out.append(rest)
        return out
