"""The simulated engine: a ``heapq`` discrete-event loop that drives the scheduling core.

Events are ordered by ``(time, seq)`` (SimPy's habit: the counter makes ties deterministic).
A running subjob costs one heap entry, not one per collision event: when it starts, its data is
cut into segments by where each event is read from (own cache, a peer's cache, tertiary
storage), each with its time per event from the cost model, so its end time, and on preemption
exactly how many events it has processed, follow in closed form (ponce-hersch §2.3, DESIGN.md).
Node caches (:class:`~datasched.core.cache.NodeCache`) are the world's truth; what a subjob
read goes into its node's cache when it stops or ends, and the change is reported to the
scheduler with that event. Preempt and Shrink are answered at once, inside the same instant.
"""

from __future__ import annotations

import heapq
import itertools
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from datasched.core.actions import Action, JobCompleted, Preempt, Shrink, Start, WakeAt
from datasched.core.cache import LRU, CacheDirectory, NodeCache, Replacement
from datasched.core.events import (
    Event,
    JobArrived,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, Job, Source, Subjob
from datasched.core.scheduler import Scheduler

__all__ = ["JobRecordTimes", "Release", "SimEngine", "SimRun"]

_ARRIVAL, _FINISH, _TICK = 0, 1, 2
_EMPTY = IntervalSet()


@dataclass(slots=True)
class _Run:
    """A subjob running on a simulated node."""

    subjob: Subjob
    start_s: float
    segments: list[tuple[int, int, float, Source, int]]
    """``(start, stop, seconds per event, source, peer node or -1)`` in processing order."""
    ends: list[float]
    """Cumulative seconds from ``start_s`` to the end of each segment."""
    local: IntervalSet
    fetched: IntervalSet
    pin: int | None
    peer_pins: list[tuple[int, int]]
    fetch: int | None
    version: int
    fill_duplicates: bool = True


@dataclass(slots=True)
class JobRecordTimes:
    """When one job was submitted, first processed and completed (seconds)."""

    job_id: int
    submit_s: float
    n_events: int
    first_start_s: float = -1.0
    end_s: float = -1.0
    released_s: float = -1.0
    """When the policy let the job go (end of its period); -1: on submission."""
    busy_s: float = 0.0
    """Node-seconds its subjobs ran (processing time x mean number of nodes it held)."""


@dataclass(frozen=True, slots=True)
class Release:
    """A release of held jobs (the end of a delaying policy's period), seen just before it."""

    time_s: float
    residual: int
    """Jobs released earlier and not finished yet: what the last periods left undone."""
    released: int
    """Held jobs let go at this instant (the period's batch)."""


@dataclass(slots=True)
class SimRun:
    """Everything one simulation measured; :mod:`datasched.sim.metrics` summarises it."""

    n_nodes: int
    jobs: list[JobRecordTimes]
    events_by_source: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Events processed, per :class:`Source`, for every job."""
    measured_events_by_source: list[int] = field(default_factory=lambda: [0, 0, 0])
    """The same, counting only jobs in the measured window."""
    busy_s: float = 0.0
    """Node-seconds spent on subjobs inside the measured time window."""
    window: tuple[float, float] = (0.0, 0.0)
    backlog: list[int] = field(default_factory=list)
    """Jobs in the system just before each arrival, less those the policy holds back."""
    releases: list[Release] = field(default_factory=list)
    """Every release of held jobs at a wake-up (a period end), in time order: how many jobs
    earlier releases left unfinished, and how many were let go. Empty for policies that hold
    nothing back, and for releases on arrival (a period of zero)."""
    stopped_early: bool = False
    end_s: float = 0.0
    n_events_handled: int = 0
    scheduler_s: float = 0.0
    """Wall-clock seconds spent inside ``Scheduler.handle``: the master's own work."""
    policy_counters: dict[str, int] = field(default_factory=dict)
    """The policy's own counters at the end (e.g. how often out-of-order's fairness fired)."""
    processed: dict[int, list[IntervalSet]] | None = None
    """With ``check_conservation``: every processed piece of every job."""


class SimEngine:
    """Runs a list of jobs through a :class:`Scheduler` on a simulated cluster."""

    def __init__(
        self,
        cluster: ClusterSpec,
        scheduler: Scheduler,
        *,
        replacement: Replacement = LRU,
        check_conservation: bool = False,
    ) -> None:
        self.cluster = cluster
        self.cost = cluster.cost
        self.scheduler = scheduler
        n = cluster.n_nodes
        self.caches = [NodeCache(cluster.cache_events(i), replacement) for i in range(n)]
        self._world: CacheDirectory | None = None
        self._runs: list[_Run | None] = [None] * n
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = itertools.count()
        self._versions = itertools.count()
        self._s_per_event = [self.cost.s_per_event(src) for src in Source]
        self._check = check_conservation
        self.now = 0.0

    @property
    def world(self) -> CacheDirectory:
        """Who caches what, across the simulated cluster: built on first use (peer reads,
        duplicate-free filling) and kept up to date from then on; policies that never ask
        do not pay for it."""
        if self._world is None:
            self._world = CacheDirectory(self.cluster.n_nodes)
            for node, cache in enumerate(self.caches):
                self._world.add(node, cache.content)
        return self._world

    # -- the loop -----------------------------------------------------------------------------

    def run(
        self,
        jobs: Sequence[Job],
        *,
        measure: tuple[int, int] | None = None,
        max_backlog: int | None = None,
    ) -> SimRun:
        """Simulate until every job has completed (or the backlog passes ``max_backlog``).

        ``measure`` is the half-open range of job indices whose statistics count (warm-up and
        cool-down excluded); its submit times bound the window for node utilisation.
        """
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        jobs = [jobs[i] for i in order]
        lo, hi = measure if measure is not None else (0, len(jobs))
        self._measured = {j.job_id for j in jobs[lo:hi]}
        w0 = jobs[lo].submit_s if lo < hi else 0.0
        w1 = jobs[hi].submit_s if hi < len(jobs) else float("inf")
        self._times = {j.job_id: JobRecordTimes(j.job_id, j.submit_s, j.n_events) for j in jobs}
        self.result = res = SimRun(n_nodes=self.cluster.n_nodes, jobs=list(self._times.values()))
        res.window = (w0, w1)
        if self._check:
            res.processed = {j.job_id: [] for j in jobs}
        heap = self._heap
        if jobs:
            heapq.heappush(heap, (jobs[0].submit_s, next(self._seq), _ARRIVAL, 0, 0))
        sched = self.scheduler
        handled = 0
        while heap:
            t, _, kind, a, b = heapq.heappop(heap)
            self.now = t
            ev: Event
            if kind == _FINISH:
                run = self._runs[a]
                if run is None or run.version != b:
                    continue  # superseded by a preemption
                ev = self._leave(a, finished=True)
            elif kind == _ARRIVAL:
                # Jobs a policy holds back on purpose (a period) are not a growing queue.
                backlog = len(sched.jobs) - sched.policy.held_jobs()
                res.backlog.append(backlog)
                if max_backlog is not None and backlog > max_backlog:
                    res.stopped_early = True
                    break
                if a + 1 < len(jobs):
                    nxt = jobs[a + 1]
                    heapq.heappush(heap, (nxt.submit_s, next(self._seq), _ARRIVAL, a + 1, 0))
                ev = JobArrived(t, jobs[a])
            else:
                ev = Tick(t)
                held = sched.policy.held_jobs()
                if held > 0:
                    # A wake-up while the policy holds jobs: the end of a period, maybe.
                    residual = len(sched.jobs) - held
                    handled += self._dispatch(ev)
                    released = held - sched.policy.held_jobs()
                    if released > 0:
                        res.releases.append(Release(t, residual, released))
                    continue
            handled += self._dispatch(ev)
        res.end_s = self.now
        res.policy_counters = dict(self.scheduler.policy.counters())
        res.n_events_handled = handled
        w1 = min(w1, self.now)
        res.window = (w0, w1)
        return res

    def _dispatch(self, ev: Event) -> int:
        count = 1
        t0 = time.perf_counter()
        actions = self.scheduler.handle(ev)
        self.result.scheduler_s += time.perf_counter() - t0
        for action in actions:
            count += self._apply(action)
        return count

    def _apply(self, action: Action) -> int:
        if isinstance(action, Start):
            self._start(action)
        elif isinstance(action, Preempt):
            return self._dispatch(self._leave(action.node, finished=False))
        elif isinstance(action, Shrink):
            return self._dispatch(self._shrink(action))
        elif isinstance(action, WakeAt):
            heapq.heappush(self._heap, (max(action.time, self.now), next(self._seq), _TICK, 0, 0))
        elif isinstance(action, JobCompleted):
            rec = self._times[action.job_id]
            rec.first_start_s = action.first_start_s
            rec.released_s = action.released_s
            rec.end_s = action.time
        return 0

    # -- costing a subjob ---------------------------------------------------------------------

    def _start(self, action: Start) -> None:
        node = action.node
        if self._runs[node] is not None:
            raise RuntimeError(f"node {node} asked to start a subjob while busy")
        sj = action.subjob
        data = sj.data
        cache = self.caches[node]
        local, other = cache.partition(data)
        pieces: list[tuple[int, int, Source, int]] = [(a, b, Source.CACHE, -1) for a, b in local]
        peer_read = _EMPTY
        peer_pins: list[tuple[int, int]] = []
        if action.peer_reads and other:
            for start, stop in other:
                for a, b, holders in self.world.holders(start, stop):
                    peers = [h for h in holders if h != node]
                    if peers:
                        peer = min(peers)
                        pieces.append((a, b, Source.PEER, peer))
                        seg = IntervalSet.range(a, b)
                        peer_read = peer_read | seg
                        peer_pins.append((peer, self.caches[peer].pin(seg)))
            other = other - peer_read
        pieces.extend((a, b, Source.TERTIARY, -1) for a, b in other)
        pieces.sort()
        spe = self._s_per_event
        segments = []
        ends = []
        total = 0.0
        for a, b, src, peer in pieces:
            per = spe[src]
            segments.append((a, b, per, src, peer))
            total += (b - a) * per
            ends.append(total)
        fetched = _EMPTY
        fetch = None
        if action.cache_fill:
            fetched = other | peer_read if action.replicate else other
            if fetched and not action.fill_duplicates:
                fetched = fetched - self._held_elsewhere(node, fetched)
            if fetched:
                fetch = cache.begin_fetch(fetched)
        pin = cache.pin(local) if local else None
        run = _Run(sj, self.now, segments, ends, local, fetched, pin, peer_pins, fetch, 0)
        run.fill_duplicates = action.fill_duplicates
        run.version = next(self._versions)
        self._runs[node] = run
        heapq.heappush(self._heap, (self.now + total, next(self._seq), _FINISH, node, run.version))

    def _shrink(self, action: Shrink) -> SubjobShrunk:
        """Take what was asked, less what is processed or in progress, from a running subjob;
        it goes on with the rest, its finish moved earlier."""
        node = action.node
        run = self._runs[node]
        if run is None or run.subjob.subjob_id != action.subjob_id:
            raise RuntimeError(f"node {node} is not running subjob {action.subjob_id}")
        segments = run.segments
        k, part = _position(run, self.now - run.start_s)
        released = _EMPTY
        if k < len(segments):
            # Segments are in ascending event order: everything after the event in progress
            # is untouched.
            in_progress = segments[k][0] + part
            released = (action.release & run.subjob.data).split_at(in_progress + 1)[1]
        if not released:
            return SubjobShrunk(self.now, action.subjob_id, node, _EMPTY)
        kept = segments[:k]
        ends = run.ends[:k]
        total = ends[-1] if ends else 0.0
        for a, b, per, src, peer in segments[k:]:
            for lo, hi in released.gaps(a, b):
                kept.append((lo, hi, per, src, peer))
                total += (hi - lo) * per
                ends.append(total)
        run.segments, run.ends = kept, ends
        run.subjob = run.subjob.shrunk(released)
        cache = self.caches[node]
        if run.pin is not None and run.local.overlaps(released):
            cache.unpin(run.pin)
            run.local = run.local - released
            run.pin = cache.pin(run.local) if run.local else None
        run.version = next(self._versions)
        finish = (run.start_s + total, next(self._seq), _FINISH, node, run.version)
        heapq.heappush(self._heap, finish)
        return SubjobShrunk(self.now, action.subjob_id, node, released)

    def _held_elsewhere(self, node: int, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that some node other than ``node`` caches."""
        held: list[tuple[int, int]] = []
        for start, stop in data:
            for a, b, holders in self.world.holders(start, stop):
                if holders and holders != {node}:
                    held.append((a, b))
        return IntervalSet(held)

    def _leave(self, node: int, *, finished: bool) -> SubjobFinished | SubjobStopped:
        """Take the subjob off ``node`` now: book what it processed and update the cache."""
        run = self._runs[node]
        if run is None:
            raise RuntimeError(f"node {node} has no subjob to stop")
        self._runs[node] = None
        now = self.now
        res = self.result
        data = run.subjob.data
        measured = run.subjob.job_id in self._measured
        counts = res.events_by_source
        mcounts = res.measured_events_by_source
        elapsed = now - run.start_s
        self._times[run.subjob.job_id].busy_s += elapsed
        if finished:
            n_done = data.length
            for a, b, _, src, _ in run.segments:
                counts[src] += b - a
                if measured:
                    mcounts[src] += b - a
        else:
            n_done = 0
            k, part = _position(run, elapsed)
            for i in range(k):
                a, b, _, src, _ = run.segments[i]
                n_done += b - a
                counts[src] += b - a
                if measured:
                    mcounts[src] += b - a
            if k < len(run.segments):
                src = run.segments[k][3]
                n_done += part
                counts[src] += part
                if measured:
                    mcounts[src] += part
        # Busy time inside the measured window.
        w0, w1 = res.window
        overlap = min(now, w1) - max(run.start_s, w0)
        if overlap > 0:
            res.busy_s += overlap
        if finished:
            processed, remaining = data, _EMPTY
        else:
            # Segments are in ascending event order: what was processed is a prefix.
            processed, remaining = data.head(n_done)
        if res.processed is not None:
            res.processed[run.subjob.job_id].append(processed)
        cache = self.caches[node]
        if run.pin is not None:
            cache.unpin(run.pin)
        for peer, token in run.peer_pins:
            self.caches[peer].unpin(token)
            self.caches[peer].touch(processed, now)
        if run.local:
            # Pinned since the start, so cached; a finished subjob read all of it (no
            # intersection to build: both sets are often fragmented).
            cache.refresh(run.local if finished else processed & run.local, now)
        added = evicted = _EMPTY
        if run.fetch is not None:
            completed = processed
            if not run.fill_duplicates:
                # Another node may have fetched the same data meanwhile.
                completed = processed - self._held_elsewhere(node, processed & run.fetched)
            added, evicted = cache.end_fetch(run.fetch, completed, now)
            if self._world is not None:
                self._world.remove(node, evicted)
                self._world.add(node, added)
        if finished:
            return SubjobFinished(now, run.subjob.subjob_id, node, added, evicted)
        return SubjobStopped(now, run.subjob.subjob_id, node, remaining, added, evicted)


def _position(run: _Run, elapsed: float) -> tuple[int, int]:
    """Where ``run`` is after ``elapsed`` seconds: the index of the segment in progress (the
    number of segments when all are done) and how many of its events are done."""
    k = bisect_right(run.ends, elapsed)
    if k >= len(run.segments):
        return len(run.segments), 0
    a, b, per, _, _ = run.segments[k]
    before = run.ends[k - 1] if k > 0 else 0.0
    return k, max(min(int((elapsed - before) / per), b - a - 1), 0)
