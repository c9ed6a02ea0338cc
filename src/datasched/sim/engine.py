"""The simulated engine: a ``heapq`` discrete-event loop that drives the scheduling core.

Events are ordered by ``(time, seq)`` (SimPy's habit: the counter makes ties deterministic).
A running subjob costs one heap entry, not one per collision event: when it starts, its data is
cut into segments by where each event is read from (own cache, a peer's cache, tertiary
storage), each with its time per event from the cost model, so its end time, and on preemption
exactly how many events it has processed, follow in closed form (ponce-hersch §2.3, DESIGN.md).
Where caches hold whole files, a file read from tertiary storage is first fetched whole (a
segment of no events lasting its transfer), then read from the local disk, as the runtime does.

Node caches are the world's truth; what a subjob read goes into its node's cache when it stops
or ends, and the change is reported to the scheduler with that event. Preempt and Shrink are
answered at once, inside the same instant. Fetches and replications move bytes over the
topology's links as a fluid (:mod:`datasched.sim.network`). Nodes may fail and come back
(:mod:`datasched.sim.faults`). What the run measures is the :class:`~datasched.sim.recorder.
Recorder`'s business; this module is the loop and the world it simulates.
"""

from __future__ import annotations

import heapq
import itertools
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from datasched.core.actions import (
    Action,
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    WakeAt,
)
from datasched.core.actions import Release as ReleasePin
from datasched.core.cache import NodeCache, new_cache
from datasched.core.data import TERTIARY, CacheGrain
from datasched.core.directory import CacheDirectory
from datasched.core.events import (
    CacheChanged,
    Event,
    FetchDone,
    JobArrived,
    NodeJoined,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
    TransferDone,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Source, Subjob, node_endpoint
from datasched.core.policy import metrics_of
from datasched.core.replacement import LRU, Replacement
from datasched.core.scheduler import Scheduler
from datasched.sim.faults import FaultStream, NodeFaults
from datasched.sim.network import Network, Transfer
from datasched.sim.recorder import JobRecordTimes, Recorder, Release, SimRun

__all__ = ["JobRecordTimes", "Release", "SimEngine", "SimRun"]

_ARRIVAL, _FINISH, _TICK, _TRANSFER, _FAIL, _REPAIR = range(6)
_LUMP = -2
"""The peer field of a segment that moves a whole file and processes no event."""
_EMPTY = IntervalSet()
_NOTHING = (0, 0, 0)


@dataclass(slots=True)
class _Run:
    """A subjob running on a simulated slot."""

    subjob: Subjob
    start_s: float
    segments: list[tuple[int, int, float, Source, int]]
    """``(start, stop, seconds per event, source, peer node or -1)`` in processing order;
    a segment with ``start == stop`` fetches a whole file and lasts ``seconds per event``."""
    ends: list[float]
    """Cumulative seconds from ``start_s`` to the end of each segment."""
    local: IntervalSet
    fetched: IntervalSet
    pin: int | None
    peer_pins: list[tuple[NodeCache, int]]
    fetch: int | None
    version: int
    fill_duplicates: bool = True


@dataclass(slots=True)
class _Move:
    """A Fetch or Replicate in flight."""

    node: int
    data: IntervalSet
    source: int | None
    token: int
    n_bytes: float
    replicate: bool


class SimEngine:
    """Runs a list of jobs through a built :class:`Scheduler` on a simulated cluster."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        replacement: Replacement = LRU,
        check_conservation: bool = False,
        faults: NodeFaults | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.space = scheduler.space
        self.cost = scheduler.cost
        self.replacement = replacement
        self.caches: list[NodeCache] = [
            new_cache(self.space, node.cache_bytes, replacement)
            for node in scheduler.topology.nodes
        ]
        self._file_grain = self.space.grain is CacheGrain.FILE
        self._world: CacheDirectory | None = None
        self._runs: dict[int, _Run] = {}
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = itertools.count()
        self._versions = itertools.count()
        self._rates: dict[tuple[int, float, float | None], tuple[float, float, float]] = {}
        self._network = Network()
        self._pins: dict[int, tuple[NodeCache, int]] = {}
        self._faults: FaultStream | None = faults.stream() if faults is not None else None
        self._down: set[int] = set()
        self._check = check_conservation
        self._jobs: dict[int, Job] = {}
        self.now = 0.0
        self._scheduler_s = 0.0

    @property
    def world(self) -> CacheDirectory:
        """Who caches what, across the simulated cluster: built on first use (peer reads,
        duplicate-free filling) and kept up to date from then on; policies that never ask
        do not pay for it."""
        if self._world is None:
            self._world = CacheDirectory(len(self.caches))
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
        """Simulate until every job has completed or failed (or the backlog passes
        ``max_backlog``).

        ``measure`` is the half-open range of job indices whose statistics count (warm-up and
        cool-down excluded); its submit times bound the window for slot utilisation.
        """
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        jobs = [jobs[i] for i in order]
        self._jobs = {j.job_id: j for j in jobs}
        sched = self.scheduler
        self.rec = rec = Recorder(
            jobs,
            n_nodes=sched.topology.n_nodes,
            n_slots=sched.n_slots,
            measure=measure if measure is not None else (0, len(jobs)),
            bytes_per_event=self.space.uniform_bytes_per_event,
            check_conservation=self._check,
        )
        heap = self._heap
        if jobs:
            heapq.heappush(heap, (jobs[0].submit_s, next(self._seq), _ARRIVAL, 0, 0))
        if self._faults is not None:
            for node in sched.nodes:
                self._schedule_failure(node)
        metrics = metrics_of(sched.policy)
        handled = 0
        arrived = 0
        while heap:
            t, _, kind, a, b = heapq.heappop(heap)
            self.now = t
            ev: Event
            if kind == _FINISH:
                run = self._runs.get(a)
                if run is None or run.version != b:
                    continue  # superseded by a preemption
                ev = self._leave(a, finished=True)
            elif kind == _ARRIVAL:
                # Jobs a policy holds back on purpose (a period) are not a growing queue.
                backlog = len(sched.jobs) - metrics.held_jobs()
                rec.arrival(backlog)
                if max_backlog is not None and backlog > max_backlog:
                    rec.run.stopped_early = True
                    break
                arrived = a + 1
                if a + 1 < len(jobs):
                    nxt = jobs[a + 1]
                    heapq.heappush(heap, (nxt.submit_s, next(self._seq), _ARRIVAL, a + 1, 0))
                ev = JobArrived(t, jobs[a])
            elif kind == _TICK:
                ev = Tick(t)
                held = metrics.held_jobs()
                if held > 0:
                    # A wake-up while the policy holds jobs: the end of a period, maybe.
                    residual = len(sched.jobs) - held
                    handled += self._dispatch(ev)
                    released = held - metrics.held_jobs()
                    if released > 0:
                        rec.release(t, residual, released)
                    continue
            elif kind == _TRANSFER:
                move = self._network.transfers.get(a)
                if move is None or move.version != b:
                    continue  # re-rated since: a later event stands for it
                handled += self._dispatch(self._moved(a))
                continue
            elif kind == _FAIL:
                handled += self._fail(a)
                if arrived == len(jobs) and not sched.jobs:
                    break
                continue
            else:
                ev = self._repair(a)
            handled += self._dispatch(ev)
            if self._faults is not None and arrived == len(jobs) and not sched.jobs:
                break  # faults go on for ever; the work is done
        self.result = rec.close(self.now, handled, self._scheduler_s, metrics.counters())
        return self.result

    def _dispatch(self, ev: Event) -> int:
        count = 1
        t0 = time.perf_counter()
        actions = self.scheduler.handle(ev)
        self._scheduler_s += time.perf_counter() - t0
        for action in actions:
            count += self._apply(action)
        return count

    def _apply(self, action: Action) -> int:
        if isinstance(action, Start | Assign):
            self._start(action)
        elif isinstance(action, Preempt):
            return self._dispatch(self._leave(action.slot, finished=False))
        elif isinstance(action, Shrink):
            return self._dispatch(self._shrink(action))
        elif isinstance(action, WakeAt):
            heapq.heappush(self._heap, (max(action.time, self.now), next(self._seq), _TICK, 0, 0))
        elif isinstance(action, JobCompleted):
            self.rec.completed(action)
        elif isinstance(action, Fetch):
            self._begin_move(action.node, action.data, action.source, replicate=False)
        elif isinstance(action, Replicate):
            self._begin_move(action.node, action.data, action.source, replicate=True)
        elif isinstance(action, Pin):
            cache = self.caches[action.node]
            self._pins[action.token] = (cache, cache.pin(action.data))
        elif isinstance(action, ReleasePin):
            pinned = self._pins.pop(action.token, None)
            if pinned is not None:
                pinned[0].unpin(pinned[1])
        elif isinstance(action, Evict):
            return self._dispatch(self._evict(action.node, action.data))
        elif isinstance(action, JobFailed):
            self.rec.failed(action)
        return 0

    # -- costing a subjob ---------------------------------------------------------------------

    def _rates_of(
        self, node: int, bytes_per_event: float, cpu: float | None
    ) -> tuple[float, float, float]:
        key = (node, bytes_per_event, cpu)
        rates = self._rates.get(key)
        if rates is None:
            rates = self.scheduler.topology.rates(node, self.cost, bytes_per_event, cpu)
            self._rates[key] = rates
        return rates

    def _start(self, action: Start | Assign) -> None:
        slot = action.slot
        if slot in self._runs:
            raise RuntimeError(f"slot {slot} asked to start a subjob while busy")
        node = self.scheduler.node_of(slot)
        sj = action.subjob
        data = sj.data
        cache = self.caches[node]
        local, other = cache.partition(data)
        pieces: list[tuple[int, int, Source, int]] = [(a, b, Source.CACHE, -1) for a, b in local]
        peer_read = _EMPTY
        peer_pins: list[tuple[NodeCache, int]] = []
        if action.peer_reads and other:
            for start, stop in other:
                for a, b, holders in self.world.holders(start, stop):
                    peers = [h for h in holders if h != node]
                    if peers:
                        peer = min(peers)
                        pieces.append((a, b, Source.PEER, peer))
                        seg = IntervalSet.range(a, b)
                        peer_read = peer_read | seg
                        peer_cache = self.caches[peer]
                        peer_pins.append((peer_cache, peer_cache.pin(seg)))
            other = other - peer_read
        pieces.extend((a, b, Source.TERTIARY, -1) for a, b in other)
        pieces.sort()
        fetched = _EMPTY
        fetch = None
        if action.cache_fill:
            fetched = other | peer_read if action.replicate else other
            if fetched and not action.fill_duplicates:
                fetched = fetched - self._held_elsewhere(node, fetched)
            if fetched:
                fetch = cache.begin_fetch(fetched)
        cpu = self._jobs[sj.job_id].cpu_s_per_event
        if self._file_grain:
            segments, ends, total = self._file_segments(node, pieces, fetched, cpu)
        else:
            spe = self._rates_of(node, self.space.bytes_per_event, cpu)
            segments = []
            ends = []
            total = 0.0
            for a, b, src, peer in pieces:
                per = spe[src]
                segments.append((a, b, per, src, peer))
                total += (b - a) * per
                ends.append(total)
        pin = cache.pin(local) if local else None
        version = next(self._versions)
        run = _Run(sj, self.now, segments, ends, local, fetched, pin, peer_pins, fetch, version)
        run.fill_duplicates = action.fill_duplicates
        self._runs[slot] = run
        heapq.heappush(self._heap, (self.now + total, next(self._seq), _FINISH, slot, version))

    def _file_segments(
        self,
        node: int,
        pieces: list[tuple[int, int, Source, int]],
        fetched: IntervalSet,
        cpu: float | None,
    ) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
        """Segments of a subjob over whole-file caches: each piece cut by file, at that
        file's event size; a file to be cached from tertiary storage is first fetched whole
        (a segment of no events), then read from the local disk."""
        space = self.space
        files = space.files
        tertiary_bps = self.scheduler.topology.tertiary_bytes_per_s(node)
        segments: list[tuple[int, int, float, Source, int]] = []
        ends: list[float] = []
        total = 0.0
        lumped: set[int] = set()
        for a, b, src, peer in pieces:
            i = space.file_at(a)
            while a < b:
                f = files[i]
                stop = min(b, f.stop)
                if stop == a:  # an empty file
                    i += 1
                    continue
                spe = self._rates_of(node, f.bytes_per_event, cpu)
                per = spe[src]
                if src is Source.TERTIARY and a in fetched:
                    if i not in lumped:
                        lumped.add(i)
                        lump = f.n_bytes / tertiary_bps
                        if lump > 0:
                            segments.append((a, a, lump, Source.TERTIARY, _LUMP))
                            total += lump
                            ends.append(total)
                    per = spe[Source.CACHE]
                segments.append((a, stop, per, src, peer))
                total += (stop - a) * per
                ends.append(total)
                a = stop
                i += 1
        return segments, ends, total

    def _shrink(self, action: Shrink) -> SubjobShrunk:
        """Take what was asked, less what is processed or in progress, from a running subjob;
        it goes on with the rest, its finish moved earlier."""
        slot = action.slot
        run = self._runs.get(slot)
        if run is None or run.subjob.subjob_id != action.subjob_id:
            raise RuntimeError(f"slot {slot} is not running subjob {action.subjob_id}")
        segments = run.segments
        k, part = _position(run, self.now - run.start_s)
        released = _EMPTY
        if k < len(segments):
            # Segments are in ascending event order: everything after the event in progress
            # is untouched.
            in_progress = segments[k][0] + part
            released = (action.release & run.subjob.data).split_at(in_progress + 1)[1]
        if not released:
            return SubjobShrunk(self.now, action.subjob_id, slot, _EMPTY)
        kept = segments[:k]
        ends = run.ends[:k]
        total = ends[-1] if ends else 0.0
        keep_data = run.subjob.data - released
        for a, b, per, src, peer in segments[k:]:
            if a == b:
                # A whole-file fetch stays if any event of its file is kept.
                f = self.space.files[self.space.file_at(a)]
                if keep_data.clip(a, f.stop):
                    kept.append((a, b, per, src, peer))
                    total += per
                    ends.append(total)
                continue
            for lo, hi in released.gaps(a, b):
                kept.append((lo, hi, per, src, peer))
                total += (hi - lo) * per
                ends.append(total)
        run.segments, run.ends = kept, ends
        run.subjob = run.subjob.shrunk(released)
        cache = self.caches[self.scheduler.node_of(slot)]
        if run.pin is not None and run.local.overlaps(released):
            cache.unpin(run.pin)
            run.local = run.local - released
            run.pin = cache.pin(run.local) if run.local else None
        run.version = next(self._versions)
        finish = (run.start_s + total, next(self._seq), _FINISH, slot, run.version)
        heapq.heappush(self._heap, finish)
        return SubjobShrunk(self.now, action.subjob_id, slot, released)

    def _held_elsewhere(self, node: int, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that some node other than ``node`` caches."""
        held: list[tuple[int, int]] = []
        for start, stop in data:
            for a, b, holders in self.world.holders(start, stop):
                if holders and holders != {node}:
                    held.append((a, b))
        return IntervalSet(held)

    def _progress(
        self, run: _Run, finished: bool
    ) -> tuple[IntervalSet, IntervalSet, tuple[int, int, int], IntervalSet]:
        """What ``run`` has processed by now, what it has not, its events by source, and an
        event of each file whose whole-file fetch is done."""
        data = run.subjob.data
        segments = run.segments
        if finished:
            k, part = len(segments), 0
        else:
            k, part = _position(run, self.now - run.start_s)
        counts = [0, 0, 0]
        n_done = 0
        lumps: list[tuple[int, int]] = []
        for i in range(k):
            a, b, _, src, peer = segments[i]
            if peer == _LUMP:
                lumps.append((a, a + 1))
            counts[src] += b - a
            n_done += b - a
        if k < len(segments):
            counts[segments[k][3]] += part
            n_done += part
        if finished:
            processed, remaining = data, _EMPTY
        else:
            # Segments are in ascending event order: what was processed is a prefix.
            processed, remaining = data.head(n_done)
        fetched_files = IntervalSet(lumps) if lumps else _EMPTY
        return processed, remaining, (counts[0], counts[1], counts[2]), fetched_files

    def _leave(self, slot: int, *, finished: bool) -> SubjobFinished | SubjobStopped:
        """Take the subjob off ``slot`` now: book what it processed and update the cache."""
        run = self._runs.pop(slot, None)
        if run is None:
            raise RuntimeError(f"slot {slot} has no subjob to stop")
        now = self.now
        processed, remaining, by_source, fetched_files = self._progress(run, finished)
        self.rec.ran(
            run.subjob.job_id,
            run.start_s,
            now,
            by_source,
            processed,
            None
            if self.space.uniform_bytes_per_event is not None
            else self._tertiary_bytes(run, processed),
        )
        cache = self.caches[self.scheduler.node_of(slot)]
        if run.pin is not None:
            cache.unpin(run.pin)
        for peer_cache, token in run.peer_pins:
            peer_cache.unpin(token)
            peer_cache.touch(processed, now)
        if run.local:
            # Pinned since the start, so cached; a finished subjob read all of it (no
            # intersection to build: both sets are often fragmented).
            cache.refresh(run.local if finished else processed & run.local, now)
        added = evicted = _EMPTY
        if run.fetch is not None:
            completed = processed | fetched_files if fetched_files else processed
            node = self.scheduler.node_of(slot)
            if not run.fill_duplicates:
                # Another node may have fetched the same data meanwhile.
                completed = completed - self._held_elsewhere(node, completed & run.fetched)
            added, evicted = cache.end_fetch(run.fetch, completed, now)
            if self._world is not None:
                self._world.remove(node, evicted)
                self._world.add(node, added)
        if finished:
            return SubjobFinished(now, run.subjob.subjob_id, slot, added, evicted)
        return SubjobStopped(now, run.subjob.subjob_id, slot, remaining, added, evicted)

    def _sized(self, run: _Run, processed: IntervalSet) -> float | None:
        """Bytes ``run`` read from tertiary storage when events differ in size (None: the
        recorder sizes its event counts)."""
        if self.space.uniform_bytes_per_event is not None:
            return None
        return self._tertiary_bytes(run, processed)

    def _tertiary_bytes(self, run: _Run, processed: IntervalSet) -> float:
        """Bytes ``run`` read from tertiary storage (events of unequal sizes)."""
        total = 0.0
        for a, b, _, src, peer in run.segments:
            if src is not Source.TERTIARY:
                continue
            if peer == _LUMP:
                if processed.clip(a, a + 1) or self._lump_done(run, a):
                    total += self.space.files[self.space.file_at(a)].n_bytes
                continue
            if a not in run.fetched:
                total += self.space.bytes_of(processed.clip(a, b))
        return total

    def _lump_done(self, run: _Run, a: int) -> bool:
        for i, seg in enumerate(run.segments):
            if seg[0] == a and seg[4] == _LUMP:
                return run.start_s + run.ends[i] <= self.now
        return False

    # -- data movement --------------------------------------------------------------------------

    def _begin_move(
        self, node: int, data: IntervalSet, source: int | None, *, replicate: bool
    ) -> None:
        cache = self.caches[node]
        _, missing = cache.partition(data)
        if source is not None:
            missing = missing & self.caches[source].content
        n_bytes = self.space.cached_bytes(missing)
        token = cache.begin_fetch(data)
        move = _Move(node, data, source, token, n_bytes, replicate)
        origin = TERTIARY if source is None else node_endpoint(source)
        path = self.scheduler.topology.route(origin, node_endpoint(node)) if n_bytes > 0 else ()
        _, changed = self._network.start(path, n_bytes, self.now, tag=move)
        self._rerated(changed)

    def _rerated(self, changed: list[Transfer]) -> None:
        """Completion events for transfers whose rate changed (older ones go stale)."""
        for t in changed:
            heapq.heappush(
                self._heap, (t.eta(), next(self._seq), _TRANSFER, t.transfer_id, t.version)
            )

    def _moved(self, transfer_id: int) -> FetchDone | TransferDone:
        t, changed = self._network.finish(transfer_id, self.now)
        self._rerated(changed)
        move = t.tag
        assert isinstance(move, _Move)
        return self._land(move, ok=True)

    def _land(self, move: _Move, *, ok: bool) -> FetchDone | TransferDone:
        """Insert what a move brought (nothing when its source failed) and say so."""
        cache = self.caches[move.node]
        added, evicted = cache.end_fetch(move.token, move.data if ok else _EMPTY, self.now)
        if self._world is not None:
            self._world.remove(move.node, evicted)
            self._world.add(move.node, added)
        if ok:
            self.rec.transferred(move.n_bytes)
        now_cached = cache.lookup(move.data)
        if move.replicate:
            assert move.source is not None
            return TransferDone(self.now, move.source, move.node, move.data, now_cached, evicted)
        return FetchDone(self.now, move.node, move.data, now_cached, evicted)

    def _evict(self, node: int, data: IntervalSet) -> CacheChanged:
        cache = self.caches[node]
        gone = cache.evict(data - cache.pinned)
        if self._world is not None:
            self._world.remove(node, gone)
        return CacheChanged(self.now, node, evicted=gone)

    # -- nodes failing and coming back --------------------------------------------------------

    def _schedule_failure(self, node: int) -> None:
        assert self._faults is not None
        at = self.now + self._faults.time_to_failure_s()
        heapq.heappush(self._heap, (at, next(self._seq), _FAIL, node, 0))

    def _fail(self, node: int) -> int:
        """``node`` fails now: its subjobs stop where they are, its cache is gone, moves to or
        from it break off; the scheduler hears NodeLost; it is back after the repair time."""
        assert self._faults is not None
        sched = self.scheduler
        self.rec.node_failed()
        self._down.add(node)
        remaining = []
        for slot in sched.slots_of(node):
            run = self._runs.pop(slot, None)
            if run is None:
                continue
            processed, rest, by_source, _ = self._progress(run, finished=False)
            self.rec.ran(
                run.subjob.job_id,
                run.start_s,
                self.now,
                by_source,
                processed,
                None
                if self.space.uniform_bytes_per_event is not None
                else self._tertiary_bytes(run, processed),
            )
            for peer_cache, token in run.peer_pins:
                peer_cache.unpin(token)
            remaining.append((slot, rest))
        handled = 0
        answers: list[Event] = []
        for transfer_id, t in list(self._network.transfers.items()):
            move = t.tag
            assert isinstance(move, _Move)
            if move.node != node and move.source != node:
                continue
            _, changed = self._network.finish(transfer_id, self.now)
            self._rerated(changed)
            if move.node != node:
                answers.append(self._land(move, ok=False))  # its source is gone
        self.caches[node] = new_cache(
            self.space, sched.topology.nodes[node].cache_bytes, self.replacement
        )
        if self._world is not None:
            self._world.clear(node)
        handled += self._dispatch(NodeLost(self.now, node, tuple(remaining)))
        for ev in answers:
            handled += self._dispatch(ev)
        at = self.now + self._faults.repair_s
        heapq.heappush(self._heap, (at, next(self._seq), _REPAIR, node, 0))
        return handled

    def _repair(self, node: int) -> NodeJoined:
        self._down.discard(node)
        self._schedule_failure(node)
        return NodeJoined(self.now, self.scheduler.topology.nodes[node])


def _position(run: _Run, elapsed: float) -> tuple[int, int]:
    """Where ``run`` is after ``elapsed`` seconds: the index of the segment in progress (the
    number of segments when all are done) and how many of its events are done."""
    k = bisect_right(run.ends, elapsed)
    if k >= len(run.segments):
        return len(run.segments), 0
    a, b, per, _, _ = run.segments[k]
    before = run.ends[k - 1] if k > 0 else 0.0
    return k, max(min(int((elapsed - before) / per), b - a - 1), 0)
