"""An index of the running subjobs for choosing which one to split for a freed slot.

Cache-oriented splitting (ponce-hersch Table 2) gives a freed slot part of the running
subjob whose split saves the most time. What a split saves depends on the events a subjob
has left and on how much of them the freed node caches (docs/performance.md, "Cost per
event as the cluster grows"). Scanning every running subjob costs O(slots) per decision;
this index answers with a few candidates instead, in two parts:

* **By pace**: for each estimated time per event, the running subjobs sorted by estimated
  end, latest first. Among subjobs of one pace whose data the freed node does not cache,
  the saving grows with the events left, and the events left grow with the estimated end:
  only the one ending last can win (with those ending within rounding of it, which are
  handed out too, see :meth:`SplitIndex.candidates`).
* **By event range**: for each job with running subjobs, which subjob last started on each
  event range (a map painted as subjobs start). Every event a running subjob holds is
  painted with it, so the subjobs whose data overlaps a node's cache are found by looking
  up the cache's ranges, without a scan.

Entries are not removed when a subjob ends or shrinks: a lookup checks each against what
runs now and skips the stale ones, and both parts are rebuilt from what runs when they
grow past a bound, so their size stays O(slots).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping

from datasched.core.intervals import IntervalSet
from datasched.core.state import JobState, Running

__all__ = ["SplitIndex"]

_ROUNDING = 4e-15
"""Relative width of the window of estimated ends that may hide more events left (the
rounding of ``start + length * pace`` and of ``(now - start) / pace``, each under 2.3 units
in the last place of the larger of the end and now, twice: :meth:`SplitIndex.candidates`)."""


class _RunMap:
    """Which (slot, subjob id) last started on each event range of one job: disjoint pieces
    sorted by start, in three parallel lists."""

    __slots__ = ("owners", "starts", "stops")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []
        self.owners: list[tuple[int, int]] = []

    def paint(self, data: IntervalSet, owner: tuple[int, int]) -> None:
        """Mark every event of ``data`` as run by ``owner`` (cutting the pieces it covers)."""
        starts, stops, owners = self.starts, self.stops, self.owners
        for a, b in data:
            lo = bisect_right(stops, a)  # the first piece ending after ``a``
            hi = bisect_left(starts, b, lo)  # the first piece starting at or after ``b``
            if lo == hi:  # in a gap
                starts.insert(lo, a)
                stops.insert(lo, b)
                owners.insert(lo, owner)
                continue
            if hi == lo + 1 and starts[lo] == a and stops[lo] == b:  # the same piece
                owners[lo] = owner
                continue
            new_starts = [a]
            new_stops = [b]
            new_owners = [owner]
            if starts[lo] < a:  # the piece cut at ``a`` keeps its head
                new_starts.insert(0, starts[lo])
                new_stops.insert(0, a)
                new_owners.insert(0, owners[lo])
            if stops[hi - 1] > b:  # and the one cut at ``b`` its tail
                new_starts.append(b)
                new_stops.append(stops[hi - 1])
                new_owners.append(owners[hi - 1])
            starts[lo:hi] = new_starts
            stops[lo:hi] = new_stops
            owners[lo:hi] = new_owners

    def owners_in(self, content: IntervalSet, out: set[tuple[int, int]]) -> None:
        """Add to ``out`` the owner of every piece that shares an event with ``content``."""
        starts, stops, owners = self.starts, self.stops, self.owners
        if not starts:
            return
        first, last = starts[0], stops[-1]
        for a, b in content:
            if b <= first:
                continue
            if a >= last:
                break
            i = bisect_right(stops, a)
            n = len(starts)
            while i < n and starts[i] < b:
                out.add(owners[i])
                i += 1

    def owner_of(self, event: int) -> tuple[int, int] | None:
        i = bisect_right(self.starts, event) - 1
        if i >= 0 and event < self.stops[i]:
            return self.owners[i]
        return None


class SplitIndex:
    """The running subjobs by pace and estimated end, and by the event ranges they run (see
    the module docstring). Fed by :meth:`add` whenever a subjob starts or is shrunk."""

    def __init__(self, running: Mapping[int, Running]) -> None:
        self._by_pace: dict[float, list[tuple[float, float, int]]] = {}
        """Pace -> its cohorts as (-estimated end, start, events), sorted ascending."""
        self._cohorts: dict[tuple[float, float, int], list[tuple[int, int]]] = {}
        """(pace, start, events) -> (slot, subjob id) of the subjobs started then with that
        many events at that pace, sorted: the same count left at any time, the same end."""
        self._entries = 0
        self._maps: dict[int, _RunMap] = {}
        """Job id -> its event ranges' last owners."""
        for r in running.values():
            self.add(r)

    def add(self, r: Running) -> None:
        """Enter ``r`` (just started, or shrunk: its end and data changed)."""
        sj = r.subjob
        pace = r.s_per_event
        key = (pace, r.start_s, sj.data.length)
        members = self._cohorts.get(key)
        if members is None:
            self._cohorts[key] = [(r.slot, sj.subjob_id)]
            entry = (-r.end_s, r.start_s, sj.data.length)
            group = self._by_pace.get(pace)
            if group is None:
                self._by_pace[pace] = [entry]
            else:
                insort(group, entry)
        else:
            member = (r.slot, sj.subjob_id)
            i = bisect_left(members, member)
            if i < len(members) and members[i] == member:
                return  # shrunk by nothing: the same cohort, the same data
            members.insert(i, member)
        self._entries += 1
        run_map = self._maps.get(sj.job_id)
        if run_map is not None:
            run_map.paint(sj.data, (r.slot, sj.subjob_id))

    def _compact(self, running: Mapping[int, Running]) -> None:
        """Rebuild from what runs (each part holds only current entries again)."""
        self._by_pace = {}
        self._cohorts = {}
        self._entries = 0
        self._maps = {}
        for r in running.values():
            self.add(r)

    def candidates(
        self,
        running: Mapping[int, Running],
        jobs: Mapping[int, JobState],
        now: float,
        content: IntervalSet,
    ) -> tuple[list[int], list[int]]:
        """``(cached, leaders)``: the slots of every settled running subjob whose data
        shares an event with ``content`` (a node's cache), and, for each pace, the slots of
        the settled running subjobs not among those that may have the most events left.

        A leader is the one of its pace (not cached) estimated to end last, with every one
        of that pace ending within the rounding window below it. Why no other can have more
        events left: a subjob's estimated count left is ``ceil(L - y)`` with ``y = (now -
        start) / a`` as computed (0 once ``y >= L``), and ``L - y`` differs from ``(end -
        now) / a`` by at most 2.3 units in the last place of ``end + now``, over ``a``; an
        end more than twice that below the leader's leaves a count no larger than the
        leader's. Costs O(paces + cached ones + window + the cache's ranges x jobs
        running), amortised, whatever the number of slots.
        """
        if self._entries > 2 * len(running) + 1024:
            self._compact(running)
        cached: list[int] = []
        cached_ids: set[int] = set()
        if content:
            self._cached(running, jobs, content, cached, cached_ids)
        cached.sort()
        leaders: list[int] = []
        cohorts = self._cohorts
        for pace, group in list(self._by_pace.items()):
            top = None
            window = 0.0
            i = 0
            while i < len(group):
                neg_end, start, length = group[i]
                if top is not None and -neg_end < top - window:
                    break
                key = (pace, start, length)
                members = cohorts[key]
                leader = self._leader(members, running, start, length, cached_ids)
                if not members:
                    del cohorts[key]
                    del group[i]
                    continue
                if leader is not None:
                    leaders.append(leader)
                    if top is None:
                        top = -neg_end
                        window = _ROUNDING * (abs(top) + abs(now))
                i += 1
            if not group:
                del self._by_pace[pace]
        return cached, leaders

    def _cached(
        self,
        running: Mapping[int, Running],
        jobs: Mapping[int, JobState],
        content: IntervalSet,
        cached: list[int],
        cached_ids: set[int],
    ) -> None:
        """Add to ``cached`` (and their ids to ``cached_ids``) the slots of the settled
        running subjobs whose data shares an event with ``content``: for a job running more
        subjobs than an eighth of ``content``'s ranges (and 8), from the job's map; for the
        others, by asking each subjob (cheaper then; their maps are not kept, nor painted)."""
        maps = self._maps
        for job_id in list(maps):
            js = jobs.get(job_id)
            if js is None or not js.running_slots:
                del maps[job_id]
        # Asking a subjob (``overlaps``: a bisect per range of its data, and a call) costs
        # several times what a lookup of one of the cache's ranges in a map does.
        few = max(8, content.n_ranges // 8)
        found: set[tuple[int, int]] = set()
        for job_id, js in jobs.items():
            slots = js.running_slots
            if not slots:
                continue
            if len(slots) <= few:
                maps.pop(job_id, None)
                for slot in slots:
                    r = running[slot]
                    if r.settled and r.subjob.data.overlaps(content):
                        cached.append(slot)
                        cached_ids.add(r.subjob.subjob_id)
                continue
            run_map = maps.get(job_id)
            if run_map is None or len(run_map.starts) > 4 * len(slots) + 16:
                run_map = maps[job_id] = _RunMap()
                for slot in slots:
                    sj = running[slot].subjob
                    run_map.paint(sj.data, (slot, sj.subjob_id))
            run_map.owners_in(content, found)
        for slot, subjob_id in found:
            held = running.get(slot)
            if (
                held is not None
                and held.settled
                and held.subjob.subjob_id == subjob_id
                and held.subjob.data.overlaps(content)
            ):
                cached.append(slot)
                cached_ids.add(subjob_id)

    def _leader(
        self,
        members: list[tuple[int, int]],
        running: Mapping[int, Running],
        start: float,
        length: int,
        cached_ids: set[int],
    ) -> int | None:
        """The lowest slot of a cohort running settled and not among the cached ones; the
        members that left it (ended, or shrunk into another) are dropped from the front."""
        i = 0
        while i < len(members):
            slot, subjob_id = members[i]
            r = running.get(slot)
            if (
                r is None
                or r.subjob.subjob_id != subjob_id
                or r.start_s != start
                or r.subjob.data.length != length
            ):
                if i == 0:
                    del members[0]
                    self._entries -= 1
                    continue
            elif r.settled and subjob_id not in cached_ids:
                return slot
            i += 1
        return None

    def check(self, running: Mapping[int, Running]) -> None:
        """Raise ValueError unless each pace's order is sorted and holds every settled
        running subjob with its current end, and every event of every running subjob is
        painted with it."""
        for pace, group in self._by_pace.items():
            for before, after in itertools.pairwise(group):
                if before >= after:
                    raise ValueError(f"the split index's pace {pace} is not sorted at {after}")
            for neg_end, start, length in group:
                members = self._cohorts.get((pace, start, length))
                if members is None or -neg_end != start + length * pace:
                    raise ValueError(
                        f"the split index's cohort {(pace, start, length)} has no members or "
                        "a wrong end"
                    )
                if any(before >= after for before, after in itertools.pairwise(members)):
                    raise ValueError(
                        f"the split index's cohort {(pace, start, length)} is not sorted"
                    )
        for slot, r in running.items():
            sj = r.subjob
            if r.settled:
                key = (r.s_per_event, r.start_s, sj.data.length)
                members = self._cohorts.get(key, [])
                entry = (slot, sj.subjob_id)
                i = bisect_left(members, entry)
                group = self._by_pace.get(r.s_per_event, [])
                j = bisect_left(group, (-r.end_s, r.start_s, sj.data.length))
                if (
                    i == len(members)
                    or members[i] != entry
                    or j == len(group)
                    or group[j] != (-r.end_s, r.start_s, sj.data.length)
                ):
                    raise ValueError(
                        f"running subjob {sj.subjob_id} on slot {slot} is missing from the "
                        "split index's order by pace"
                    )
            run_map = self._maps.get(sj.job_id)
            if run_map is None:
                continue  # not kept: the job's subjobs are asked one by one
            for a, b in sj.data:
                pos = a
                while pos < b:
                    i = bisect_right(run_map.starts, pos) - 1
                    if (
                        i < 0
                        or run_map.stops[i] <= pos
                        or run_map.owners[i] != (slot, sj.subjob_id)
                    ):
                        owner = run_map.owner_of(pos)
                        raise ValueError(
                            f"event {pos} of running subjob {sj.subjob_id} on slot {slot} is "
                            f"not marked as its in the split index (marked: {owner})"
                        )
                    pos = run_map.stops[i]
