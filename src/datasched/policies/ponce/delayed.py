"""Delayed scheduling (ponce-hersch §5, Table 4).

Jobs accumulate during a period and are scheduled together at its end: cut by cache content,
cached parts queued on their nodes, non-cached parts cut on common stripe points and gathered
into meta-subjobs over the same stripe, so that data is loaded from tertiary storage once per
period and read from the cache by every other subjob that needs it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise
from typing import ClassVar

from datasched.core.intervals import IntervalSet
from datasched.core.model import Part, Subjob
from datasched.core.policy import DEFAULT, JobView, Param, Policy, ReadMode, SchedulerView
from datasched.policies.ponce.fcfs import cut_by_cache
from datasched.policies.registry import register

__all__ = ["DelayedScheduling", "MetaSubjob", "stripe_points"]


def stripe_points(points: list[int], stripe: int) -> list[int]:
    """Table 4's stripe points: drop points that make stripes shorter than half the stripe
    size, then add points so that no stripe is longer than the stripe size.

    The first and last points always stay; added points cut a long stripe into equal parts.
    """
    if stripe < 1:
        raise ValueError(f"stripe: must be positive, got {stripe!r}")
    pts = sorted(set(points))
    if len(pts) < 2:
        return pts
    kept = [pts[0]]
    for p in pts[1:-1]:
        if p - kept[-1] >= stripe / 2 and pts[-1] - p >= stripe / 2:
            kept.append(p)
    kept.append(pts[-1])
    out = [kept[0]]
    for a, b in pairwise(kept):
        parts = math.ceil((b - a) / stripe)
        out.extend(a + (b - a) * i // parts for i in range(1, parts))
        out.append(b)
    return out


@dataclass(slots=True)
class MetaSubjob:
    """Non-cached subjobs over one stripe of data, queued by their earliest arrival."""

    arrival_s: float
    stripe: tuple[int, int]
    subjobs: list[Subjob] = field(default_factory=list)


STRIPE_EVENTS = Param(
    "stripe_events",
    int,
    5000,
    "stripe size: uncached data is cut on common stripe points (Table 4)",
    low=1,
    unit="events",
)
"""Declared by delayed scheduling and by adaptive delay, which stripes the same way."""


@register
class DelayedScheduling(Policy):
    """Delayed scheduling (ponce-hersch Table 4), periods of ``period_h`` hours and stripes of
    at most ``stripe_events`` events. A period of 0 schedules each job when it arrives.

    Where the table leaves room: periods are aligned on multiples of the period from time 0
    and stop while the cluster is empty; a cached piece goes to the queue of one node caching
    it (an idle one if any); a slot with nothing left on its node pops the next meta-subjob
    into its node's queue; the queue of a lost node becomes the next meta-subjob. When no job
    can arrive any more (a finite jobs file, :meth:`arrivals_closed`), the period ends at
    once: nothing is left to gather, and waiting would only delay what is held.
    """

    name = "delayed"
    section = "ponce-hersch §5, Table 4"
    summary = "delayed: jobs gathered per period, striped, data loaded once per period"
    reads = ReadMode(cache_fill=True)
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "period_h",
            float,
            48.0,
            "length of a period; the jobs that arrive during a period are scheduled together "
            "at its end (Table 4)",
            low=0.0,
            unit="hours",
        ),
        STRIPE_EVENTS,
    )

    def __init__(self, *, period_h: float = DEFAULT, stripe_events: int = DEFAULT) -> None:
        self.period_s = period_h * 3600.0
        self.stripe_events = stripe_events
        self.pending: list[JobView] = []
        self.node_queues: dict[int, deque[Subjob]] = {}
        self.meta: deque[MetaSubjob] = deque()
        self._next_tick: float | None = None

    # -- metrics (PolicyMetrics) ----------------------------------------------------------------

    def held_jobs(self) -> int:
        return len(self.pending)

    def max_delay_s(self) -> float:
        return self.period_s

    # -- hooks ----------------------------------------------------------------------------------

    def bind(self, sched: SchedulerView) -> None:
        self.node_queues = {n: deque() for n in sched.nodes}

    def node_joined(self, sched: SchedulerView, node: int) -> None:
        self.node_queues.setdefault(node, deque())

    def node_lost(self, sched: SchedulerView, node: int) -> None:
        queue = self.node_queues.get(node)
        if not queue:
            return
        moved = MetaSubjob(sched.now, (queue[0].data.start, queue[-1].data.stop))
        for sj in queue:
            # Its cache is gone: the same events, no longer cached anywhere.
            moved.subjobs.extend(sched.resplit(sj, [Part(sj.data)]))
        queue.clear()
        self.meta.appendleft(moved)

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        self.pending = [p for p in self.pending if p.job_id != js.job_id]
        for queue in self.node_queues.values():
            kept = [sj for sj in queue if sj.job_id != js.job_id]
            queue.clear()
            queue.extend(kept)
        for meta in self.meta:
            meta.subjobs = [sj for sj in meta.subjobs if sj.job_id != js.job_id]
        # A stripe left with no subjob is dropped: an empty one taken by a free slot would
        # leave that slot idle while later stripes wait.
        self.meta = deque(meta for meta in self.meta if meta.subjobs)

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        self.pending.append(js)
        if self._next_tick is not None:
            sched.note_held(js, self._next_tick)
            return
        period = self.next_period_s(sched)
        if period == 0:
            # No delay: the job is scheduled on arrival, cut and striped all the same.
            self._release(sched)
            return
        self._next_tick = self.first_period_end(sched, period)
        sched.wake_at(self._next_tick)
        sched.note_held(js, self._next_tick)

    def arrivals_closed(self, sched: SchedulerView) -> None:
        """No job will join those held: the period ends now (its wake-up, still due, finds
        nothing to do)."""
        if self.pending:
            self._next_tick = None
            self._release(sched)

    def next_period_s(self, sched: SchedulerView) -> float:
        """The length of the period starting now (fixed here; adaptive delay varies it)."""
        return self.period_s

    def first_period_end(self, sched: SchedulerView, period_s: float) -> float:
        """When the first period after an idle spell ends: on multiples of the period."""
        return (math.floor(sched.now / period_s) + 1) * period_s

    def tick(self, sched: SchedulerView) -> None:
        if self._next_tick is None or sched.now < self._next_tick:
            return
        self._next_tick = None
        self._schedule_period(sched)
        if (sched.jobs or self.pending) and not sched.arrivals_closed:
            period = self.next_period_s(sched)
            if period > 0:
                self._next_tick = sched.now + period
                sched.wake_at(self._next_tick)
        self._feed_idle(sched)

    def _release(self, sched: SchedulerView) -> None:
        """Schedule what accumulated and give idle nodes their work."""
        self._schedule_period(sched)
        self._feed_idle(sched)

    def _feed_idle(self, sched: SchedulerView) -> None:
        for slot in list(sched.idle_slots):
            if sched.is_idle(slot):
                self.work_requested(sched, slot, None)

    def _schedule_period(self, sched: SchedulerView) -> None:
        uncached: list[tuple[JobView, IntervalSet]] = []
        for js in self.pending:
            sched.note_released(js)
            for data, holder in cut_by_cache(sched, js.job.data):
                if holder is None:
                    uncached.extend((js, IntervalSet.range(a, b)) for a, b in data)
                else:
                    self.node_queues[holder].append(sched.new_subjob(js, data, cached_on=holder))
        self.pending = []
        if not uncached:
            return
        points = [p for _, d in uncached for p in (d.start, d.stop)]
        cuts = stripe_points(points, self.stripe_events)
        metas: dict[tuple[int, int], MetaSubjob] = {}
        for js, data in uncached:
            lo = max(0, _index_at_or_before(cuts, data.start))
            for i in range(lo, len(cuts) - 1):
                a, b = cuts[i], cuts[i + 1]
                if a >= data.stop:
                    break
                part = data.clip(a, b)
                if not part:
                    continue
                meta = metas.get((a, b))
                if meta is None:
                    meta = metas[(a, b)] = MetaSubjob(js.job.submit_s, (a, b))
                meta.arrival_s = min(meta.arrival_s, js.job.submit_s)
                meta.subjobs.append(sched.new_subjob(js, part))
        self.meta.extend(sorted(metas.values(), key=lambda m: (m.arrival_s, m.stripe)))

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        queue = self.node_queues[sched.node_of(slot)]
        while not queue and self.meta:
            queue.extend(self.meta.popleft().subjobs)
        if queue:
            sched.start(queue.popleft(), slot)


def _index_at_or_before(points: list[int], x: int) -> int:
    return bisect_right(points, x) - 1
