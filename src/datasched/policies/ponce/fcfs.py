"""First-come-first-served policies of ponce-hersch §3: processing farm, job splitting and
cache-oriented job splitting (Tables 1 and 2)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from typing import ClassVar

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.policy import (
    DEFAULT,
    JobView,
    Param,
    Policy,
    ReadMode,
    Returned,
    RunningView,
    SchedulerView,
)
from datasched.core.scheduler import validate_by_default
from datasched.core.state import Running, SchedulerError, SubjobState
from datasched.policies.registry import register

__all__ = ["CacheOrientedSplitting", "JobSplitting", "ProcessingFarm", "cut_by_cache"]

_EMPTY = IntervalSet()


@register
class ProcessingFarm(Policy):
    """A job runs whole on the first free node; no caching (ponce-hersch §3.1).

    The M/E_r/m queue of the paper; our reference for every other policy.
    """

    name = "farm"
    section = "ponce-hersch §3.1"
    summary = "processing farm: one job per node, first come first served, no cache"

    def __init__(self) -> None:
        self._returned: deque[Subjob] = deque()
        """Work a lost node gave back: it runs before any queued job (it is older)."""

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        if sched.idle_slots:
            sched.start(sched.new_subjob(js, js.job.data), sched.idle_slots[0])
        else:
            sched.queue_job(js)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        if self._returned:
            sched.start(self._returned.popleft(), slot)
            return
        js = sched.pop_queued_job()
        if js is not None:
            sched.start(sched.new_subjob(js, js.job.data), slot)

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        self._returned.append(sj)

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        self._returned = deque(sj for sj in self._returned if sj.job_id != js.job_id)


def _multi_slot_jobs(sched: SchedulerView) -> list[JobView]:
    """Jobs running on two or more slots (none of them being preempted), in arrival order."""
    out = []
    for js in sched.jobs.values():
        if len(js.running_slots) >= 2 and all(sched.running[n].settled for n in js.running_slots):
            out.append(js)
    return out


def _estimated_remaining_events(sched: SchedulerView, js: JobView) -> int:
    now = sched.now
    left = sum(sched.running[n].estimated_remaining(now) for n in js.running_slots)
    return left + sum(sj.data.length for sj in js.suspended)


def _job_to_shrink(sched: SchedulerView) -> JobView | None:
    """The job with the largest number of slots per event still to process (Table 1)."""
    best: JobView | None = None
    best_ratio = -1.0
    for js in _multi_slot_jobs(sched):
        ratio = len(js.running_slots) / max(_estimated_remaining_events(sched, js), 1)
        if ratio > best_ratio:
            best, best_ratio = js, ratio
    return best


def cut_by_cache(sched: SchedulerView, data: IntervalSet) -> list[tuple[IntervalSet, int | None]]:
    """``data`` cut into runs each cached on one node (that node) or on none (``None``).

    The cutting of ponce-hersch Tables 2-4: "data processed by a given subjob should always
    either be fully cached on a node or not cached at all". Cached runs shorter than the
    minimal subjob count as not cached; a run cached on several nodes goes to one with an
    idle slot. Everything cached on one node forms one piece; non-cached runs stay separate.
    """
    runs: list[tuple[int, int, int | None]] = []
    minimum = sched.min_subjob_events
    slot_node = sched.slot_node
    idle = {slot_node[s] for s in sched.idle_slots}
    for start, stop in data:
        for a, b, holders in sched.directory.holders(start, stop):
            holder = None
            if len(holders) == 1:
                (holder,) = holders
            elif holders:
                free = idle.intersection(holders)
                holder = min(free) if free else min(holders)
            if runs and runs[-1][2] == holder and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b, holder)
            else:
                runs.append((a, b, holder))
    merged: dict[int | None, list[tuple[int, int]]] = {}
    order: list[int | None] = []
    for a, b, holder in runs:
        if holder is not None and b - a < minimum:
            holder = None
        if holder not in merged:
            merged[holder] = []
            order.append(holder)
        merged[holder].append((a, b))
    out: list[tuple[IntervalSet, int | None]] = []
    for holder in order:
        ranges = IntervalSet.from_sorted(merged[holder])  # in event order, disjoint
        if holder is None:
            out.extend((IntervalSet.range(a, b), None) for a, b in ranges)
        else:
            out.append((ranges, holder))
    return out


def _split_saving(
    sched: SchedulerView,
    slot: int,
    data: IntervalSet,
    target: int,
    s_here: float | None = None,
) -> float:
    """Seconds saved by splitting ``data`` (to run on ``slot``) with the free ``target``.

    Alone, ``slot`` needs ``n * a`` seconds (``a`` its time per event); split so both parts
    end together, ``n * a * b / (a + b)``, with ``b`` the target's time per event. The saving,
    ``n * a * a / (a + b)``, is half the time when both read at the same speed, more when the
    target caches the data, less when the data is cached where it is (the split part would be
    read again from tertiary storage).
    """
    n = data.length
    if n < 2 * sched.min_subjob_events:
        return 0.0
    a = s_here if s_here is not None else sched.s_per_event_on(slot, data)
    b = sched.s_per_event_on(target, data)
    return n * a * a / (a + b)


def _best_split_by_scan(sched: SchedulerView, target: int) -> int | None:
    """The split choice's rule: of every settled running subjob, the one whose split with
    the free ``target`` saves the most (:func:`_split_saving` of what it is estimated to have
    left); on equal savings the one estimated to end last, then the lowest slot. None when no
    split saves anything. At one pace, the subjob ending last has the most events left, so
    an index by pace and end finds the winner among the subjobs whose data the target does
    not cache (docs/performance.md, "Cost per event as the cluster grows"). This scan costs
    every subjob in full, O(slots): the reference ``CacheOrientedSplitting._best_split`` must
    agree with."""
    now = sched.now
    best: int | None = None
    best_key = (0.0, 0.0, 0)
    for other, r in sched.running.items():
        if not r.settled:
            continue
        _, rest = r.subjob.data.head(r.estimated_done(now))
        saving = _split_saving(sched, other, rest, target, r.s_per_event)
        if saving <= 0.0:
            continue
        key = (saving, r.end_s, -other)
        if best is None or key > best_key:
            best, best_key = other, key
    return best


SCAN_AT_MOST = 24
"""On a cluster of up to this many slots, :meth:`CacheOrientedSplitting._best_split` costs
every running subjob (:func:`_best_split_few`) instead of asking the split index (which is
then never built). Timed decision by decision on the same states (benchmarks/run.py's
configuration): the scan took 0.63 of the index's time at 10 nodes, 0.8 at 15 and 20, 1.2
at 30 and 2.5 at 60. By slots, not by what runs: on a large cluster a moment with few
running subjobs has fragmented data, which the scan costs in full where the index need not."""


def _best_split_few(sched: SchedulerView, target: int, content: IntervalSet) -> int | None:
    """:func:`_best_split_by_scan`'s answer, costing every settled running subjob with the
    very arithmetic of :func:`_split_saving` and :meth:`s_per_event_on` (events of one size,
    no peer reads: the same floats), written out: the events it has left as
    :meth:`Running.estimated_done` counts them, and of those, the ones ``content`` (the
    target's cache) holds, counted only for a subjob whose data meets it (one call tells,
    for all of them). O(slots): for a few slots only (``SCAN_AT_MOST``)."""
    s_cache, s_peer, s_tertiary = sched.read_rates(target)
    # The scheduler's records behind its read-only view (their state is read directly). Not
    # ``typing.cast``: compiled, that is a call into an interpreted function at every choice.
    running: Mapping[int, Running] = sched.running  # type: ignore[assignment]
    data: list[IntervalSet] = []
    settled = _settled(running, data)
    cached = content.overlaps_each(data)
    return _best_of_settled(
        settled,
        data,
        cached,
        content,
        sched.now,
        2 * sched.min_subjob_events,
        s_cache,
        s_peer,
        s_tertiary,
    )


_RUNNING = SubjobState.RUNNING


def _settled(
    running: Mapping[int, Running], data: list[IntervalSet]
) -> list[tuple[int, RunningView]]:
    """The ``(slot, record)`` of the running subjobs no Preempt or Shrink awaits an answer
    for: ``Running.settled``, read as the record's state (compiled, a field of the record:
    policies/ponce/fcfs.pxd; the property is a call each, at every split choice). Each one's
    data is appended to ``data``, in the same order: read here, where the record's type is
    known, once for both the cache's question and the costing."""
    out: list[tuple[int, RunningView]] = []
    for other, r in running.items():
        if r.state is _RUNNING:
            out.append((other, r))
            data.append(r.subjob.data)
    return out


def _best_of_settled(
    settled: list[tuple[int, RunningView]],
    settled_data: list[IntervalSet],
    cached: list[bool],
    content: IntervalSet,
    now: float,
    minimum: int,
    s_cache: float,
    s_peer: float,
    s_tertiary: float,
) -> int | None:
    """:func:`_best_split_few`'s loop over the settled running subjobs (``settled_data``:
    each one's data; ``cached``: whether it meets ``content``). Apart, so that the compiled
    build types its locals (policies/ponce/fcfs.pxd: the running record's times and the
    event counts in C, the same floats); the function that asks is patched by tests, and this
    one is called from it."""
    best: int | None = None
    # The best key ``(saving, end, -slot)`` held as its numbers, compared in that order as
    # the tuple would be (compiled, in C: no tuple built for each subjob); its slot is ``best``.
    best_saving = best_end = 0.0
    for k in range(len(settled)):  # (by index: a zip is a call with keywords)
        other, r = settled[k]
        is_cached = cached[k]
        a = r.s_per_event
        data = settled_data[k]
        length = data.length
        done = min(length, int((now - r.start_s) / a)) if a > 0 else 0
        n = length - done
        if n < minimum or n == 0:
            continue  # no saving (``_split_saving``'s zero never wins)
        local = content.overlap_length(data.drop(done)) if is_cached else 0
        b = (local * s_cache + 0 * s_peer + (n - local) * s_tertiary) / n
        saving = n * a * a / (a + b)
        if saving > 0.0:
            end = r.end_s
            if (
                best is None
                or saving > best_saving
                or (
                    saving == best_saving and (end > best_end or (end == best_end and other < best))
                )
            ):
                best, best_saving, best_end = other, saving, end
    return best


@register
class JobSplitting(Policy):
    """Jobs split over idle nodes, first come first served, no caching (ponce-hersch Table 1).

    Choices where the table is silent: the subjob suspended for a newcomer is the one of the
    chosen job with the least estimated work left (the least work parked); a freed node with
    nothing of its own job to resume takes a queued job, then any job's suspended subjob
    (oldest job first), and only then splits the largest running subjob.
    """

    name = "splitting"
    section = "ponce-hersch §3.2, Table 1"
    summary = "job splitting: subjobs of equal size on idle nodes, first come first served"

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        idle = sched.idle_slots
        if idle:
            parts = sched.split_even(js.job.data, len(idle))
            for part, slot in zip(parts, list(idle), strict=False):
                sched.start(sched.new_subjob(js, part), slot)
            return
        victim_job = _job_to_shrink(sched)
        if victim_job is None:
            sched.queue_job(js)
            return
        slot = min(
            victim_job.running_slots,
            key=lambda n: (sched.running[n].estimated_remaining(sched.now), n),
        )
        # The victim's rest is parked first in its job (the default of work_returned).
        sched.preempt(slot, replacement=sched.new_subjob(js, js.job.data))

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        if ended is not None and ended.job_id in sched.jobs and ended.suspended:
            sched.start(ended.suspended[0], slot)
            return
        if sched.job_queue:  # (asked first: the queue is empty at nearly every freed slot)
            queued = sched.pop_queued_job()
            if queued is not None:
                sched.start(sched.new_subjob(queued, queued.job.data), slot)
                return
        for js in sched.jobs.values():
            if js.suspended:
                sched.start(js.suspended[0], slot)
                return
        victim = sched.longest_running()
        if victim is not None:
            sched.split_running(victim, slot)


@register
class CacheOrientedSplitting(Policy):
    """Job splitting that caches what it reads and sends subjobs to the nodes caching their
    data (ponce-hersch §3.3, Table 2).

    A job is cut into pieces each fully cached on one node or not cached at all (cached pieces
    shorter than the minimal subjob size count as not cached). Where the table leaves room:
    an idle slot with no piece of its node's own takes a non-cached piece, then a piece cached
    on a busy node; when idle slots outnumber the pieces, the piece with the most estimated
    time is split so all its parts end together; the caching benefit of splitting a running
    subjob for a freed slot is the number of its remaining events that slot's node caches.
    """

    name = "cache-splitting"
    section = "ponce-hersch §3.3, Table 2"
    summary = "cache-oriented job splitting: subjobs go where their data is cached, FIFO"
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "fill_duplicates",
            bool,
            True,
            "cache data that another node caches already (off: each range cached once)",
            option=False,
        ),
    )

    def __init__(self, *, fill_duplicates: bool = DEFAULT) -> None:
        self.reads = ReadMode(cache_fill=True, fill_duplicates=fill_duplicates)
        self._check = validate_by_default()
        """Check every split choice against the full scan (with the
        scheduler's validation: ``DATASCHED_VALIDATE=1``, as in the tests)."""

    # -- placing a job on free slots ----------------------------------------------------------

    def _launch(self, sched: SchedulerView, js: JobView, slots: list[int]) -> None:
        """Give each of the free ``slots`` the most suitable piece of ``js``; park the rest."""
        pieces = cut_by_cache(sched, js.job.data)
        plan: dict[int, tuple[IntervalSet, int | None]] = {}
        free = list(slots)
        rest: list[tuple[IntervalSet, int | None]] = []
        for data, holder in pieces:
            slot = None
            if holder is not None:
                slot = next((s for s in free if s not in plan and sched.node_of(s) == holder), None)
            if slot is not None:
                plan[slot] = (data, holder)
            else:
                rest.append((data, holder))
        free = [n for n in free if n not in plan]
        # Non-cached pieces first (largest first), then pieces cached on busy nodes.
        rest.sort(key=lambda p: (p[1] is not None, -p[0].length, p[0].start))
        while free and rest:
            plan[free.pop(0)] = rest.pop(0)
        # More free slots than pieces: each free slot joins the planned piece with the most
        # time per slot, then each piece is cut so its slots all end together (equal parts
        # for data nobody caches, as in Table 1).
        helpers: dict[int, list[int]] = {n: [] for n in plan}
        minimum = sched.min_subjob_events
        # Each planned piece's time per event on its slot, asked once (nothing changes the
        # caches while planning): the same floats as asking at each free slot.
        pace = {n: sched.s_per_event_on(n, plan[n][0]) for n in plan}

        def per_slot_s(n: int) -> float:
            data = plan[n][0]
            if data.length < (len(helpers[n]) + 2) * minimum:
                return -1.0
            return data.length * pace[n] / (len(helpers[n]) + 1)

        # The piece with the most time per slot, the lowest slot on ties: a heap of
        # (-time per slot, slot), where only the chosen piece's time changes.
        most = [(-per_slot_s(n), n) for n in plan]
        heapq.heapify(most)
        for target in free:
            if not most or most[0][0] > 0:
                break  # no piece left that can take another slot
            best = most[0][1]
            helpers[best].append(target)
            heapq.heapreplace(most, (-per_slot_s(best), best))
        for slot, extra in helpers.items():
            if not extra:
                continue
            data, holder = plan[slot]
            rates = [1 / sched.s_per_event_on(n, data) for n in [slot, *extra]]
            total = sum(rates)
            sizes = [round(data.length * r / total) for r in rates]
            sizes[0] = data.length - sum(sizes[1:])
            left = data
            for i, n in enumerate([slot, *extra]):
                part, left = sched.cut(left, sizes[i]) if i < len(extra) else (left, IntervalSet())
                plan[n] = (part, holder if n == slot else None)
        for slot in sorted(plan):
            data, holder = plan[slot]
            sched.start(sched.new_subjob(js, data, cached_on=holder), slot)
        for data, holder in rest:
            sched.suspend(sched.new_subjob(js, data, cached_on=holder), front=False)

    # -- the table's three cases --------------------------------------------------------------

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        if sched.idle_slots:
            self._launch(sched, js, list(sched.idle_slots))
            return
        multi = _multi_slot_jobs(sched)
        if not multi:
            sched.queue_job(js)
            return
        pieces = cut_by_cache(sched, js.job.data)
        # Best: a slot running non-cached work of a multi-slot job, on a node caching data
        # of the newcomer.
        candidates = [
            (data.length, -slot)
            for data, holder in pieces
            if holder is not None
            for m in multi
            for slot in m.running_slots
            if sched.node_of(slot) == holder and sched.running[slot].subjob.cached_on != holder
        ]
        if candidates:
            slot = -max(candidates)[1]
        else:
            victim_job = _job_to_shrink(sched)
            assert victim_job is not None
            slot = min(
                victim_job.running_slots,
                key=lambda n: (
                    sched.running[n].subjob.cached_on == sched.node_of(n),
                    sched.running[n].estimated_remaining(sched.now),
                    n,
                ),
            )
        node = sched.node_of(slot)
        # The newcomer's piece for that slot: cached there if any, else the largest non-cached.
        own = [p for p in pieces if p[1] == node]
        others = [p for p in pieces if p[1] != node]
        if own:
            first = own[0]
        else:
            others.sort(key=lambda p: (p[1] is not None, -p[0].length, p[0].start))
            first = others.pop(0)
        sj = sched.new_subjob(js, first[0], cached_on=first[1])
        for data, holder in others:
            sched.suspend(sched.new_subjob(js, data, cached_on=holder), front=False)
        # The victim's rest is parked first in its job (the default of work_returned).
        sched.preempt(slot, replacement=sj)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        if ended is not None and ended.job_id in sched.jobs and ended.suspended:
            sched.start(self._most_cached(sched, slot, list(ended.suspended)), slot)
            return
        queued = sched.pop_queued_job()
        if queued is not None:
            self._launch(sched, queued, [slot])
            return
        waiting = [sj for js in sched.jobs.values() for sj in js.suspended]
        if waiting:
            sched.start(self._most_cached(sched, slot, waiting), slot)
            return
        self._split_for(sched, slot)

    def _best_split(self, sched: SchedulerView, target: int) -> int | None:
        """:func:`_best_split_by_scan`'s answer from a few candidates instead of every slot.

        The scheduler's split index (``split_candidates``) hands out every subjob whose data
        the target's node caches, costed in full, and, for each pace, the subjobs not among
        them that may have the most events left: the others of that pace have no more events
        left and an earlier end, so they cannot win. Those are costed from their remaining
        count alone, with the very arithmetic of :meth:`s_per_event_on` (nothing cached on
        the target, no peer reads), so the savings compared are the scan's floats. With peer
        reads or events of unequal sizes the scan runs.
        """
        if self.reads.peer_reads or sched.space.uniform_bytes_per_event is None:
            return _best_split_by_scan(sched, target)
        content = sched.directory.content(sched.node_of(target))
        if len(sched.slot_node) <= SCAN_AT_MOST:
            return _best_split_few(sched, target, content)
        now = sched.now
        running = sched.running
        minimum = 2 * sched.min_subjob_events
        s_tertiary = sched.read_rates(target)[2]
        cached, leaders = sched.split_candidates(content)
        best: int | None = None
        best_key = (0.0, 0.0, 0)
        for other in cached:
            r = running[other]
            _, rest = r.subjob.data.head(r.estimated_done(now))
            saving = _split_saving(sched, other, rest, target, r.s_per_event)
            if saving > 0.0:
                key = (saving, r.end_s, -other)
                if best is None or key > best_key:
                    best, best_key = other, key
        for other in leaders:
            r = running[other]
            a = r.s_per_event
            length = r.subjob.data.length
            n = length - (min(length, int((now - r.start_s) / a)) if a > 0 else 0)
            if n < minimum or n == 0:
                continue  # no saving (``_split_saving``'s zero never wins)
            # s_per_event_on's weighting with nothing cached here and no peer reads.
            saving = n * a * a / (a + (n * s_tertiary) / n)
            if saving > 0.0:
                key = (saving, r.end_s, -other)
                if best is None or key > best_key:
                    best, best_key = other, key
        return best

    @staticmethod
    def _most_cached(sched: SchedulerView, slot: int, subjobs: list[Subjob]) -> Subjob:
        """The subjob with the most data cached on ``slot``'s node (the earliest on ties)."""
        content = sched.directory.content(sched.node_of(slot))
        best = subjobs[0]
        best_n = best.data.overlap_length(content)
        for sj in subjobs[1:]:
            n = sj.data.overlap_length(content)
            if n > best_n:
                best, best_n = sj, n
        return best

    def _split_for(self, sched: SchedulerView, slot: int) -> None:
        """Split the running subjob whose split saves the most time (Table 2's "largest
        caching benefit"); the freed slot takes what its node caches of it, if enough, else
        a tail sized so both parts end together."""
        best = self._best_split(sched, slot)
        if self._check:
            expected = _best_split_by_scan(sched, slot)
            if best != expected:
                raise SchedulerError(
                    f"cache-splitting: split choice for slot {slot} is {best}, "
                    f"the full scan gives {expected}"
                )
        if best is None:
            return
        holder = sched.node_of(best)
        here = sched.node_of(slot)
        directory = sched.directory
        minimum = sched.min_subjob_events

        def pick(remaining: IntervalSet) -> IntervalSet:
            content = directory.content(here)
            if remaining.overlap_length(content) < minimum:
                # What the cut below gives is no longer: split_running moves a balanced tail
                # for it as for nothing. Counted without building it (most splits).
                return _EMPTY
            return (remaining & content) - directory.content(holder)

        sched.split_running(best, slot, pick)
