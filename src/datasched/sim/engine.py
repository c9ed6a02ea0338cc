"""The simulated engine: a ``heapq`` discrete-event loop that drives the scheduling core.

Events are ordered by ``(time, seq)`` (SimPy's habit: the counter makes ties deterministic).
A running subjob costs one heap entry, not one per collision event: when it starts, its data is
cut into segments by where each event is read from (own cache, a peer's cache, tertiary
storage), each with its time per event from the cost model, so its end time, and on preemption
exactly how many events it has processed, follow in closed form (ponce-hersch §2.3, docs/design.md).
Where caches hold whole files, a file read from tertiary storage is first fetched whole (a
segment of no events lasting its transfer), then read from the local disk, as the runtime does.

Node caches are the world's truth; what a subjob read goes into its node's cache when it stops
or ends, and the change is reported to the scheduler with that event. Preempt and Shrink are
answered at once, inside the same instant. Fetches and replications move bytes over the
topology's links as a fluid (:mod:`datasched.sim.network`). Nodes may fail and come back
(:mod:`datasched.sim.faults`). What the run measures is the :class:`~datasched.sim.recorder.
Recorder`'s business; this module is the loop and the world it simulates.

Three things are off unless asked for, and change nothing when off: disks shared by their
readers (``CostModel.shared_disks``, :mod:`datasched.sim.disks`), a log of every subjob as
PROOF logs packets (``record_packets``), and closed workloads (``follow_up``: a user submits
the next job when the last ends). Files whose replicas name a node lie on its disk from the
start.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

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
    Tick,
    TransferDone,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Source, node_endpoint
from datasched.core.policy import metrics_of
from datasched.core.replacement import LRU, Replacement
from datasched.core.scheduler import Scheduler
from datasched.sim.disks import SEGMENT
from datasched.sim.faults import FaultStream, NodeFaults
from datasched.sim.fetches import FileFetch
from datasched.sim.network import Network, Transfer
from datasched.sim.recorder import JobRecordTimes, PacketRecord, Recorder, Release, SimRun
from datasched.sim.state import FINISH as _FINISH
from datasched.sim.subjobs import SubjobRuns, _Run

__all__ = ["FollowUp", "JobRecordTimes", "PacketRecord", "Release", "SimEngine", "SimRun"]

_ARRIVAL, _TICK, _TRANSFER, _FAIL, _REPAIR, _FOLLOW = 0, 2, 3, 4, 5, 7
"""Kinds of heap entries (a subjob's end, ``_FINISH``, is 1; the end of a stretch read from
one shared disk, ``SEGMENT``, is 6)."""

FollowUp = Callable[[Job, float], "Job | None"]
"""A closed workload's rule: given a job that completed and when, the job its user submits
next (None: none)."""
_EMPTY = IntervalSet()


@dataclass(slots=True)
class _Move:
    """A Fetch or Replicate in flight."""

    node: int
    data: IntervalSet
    source: int | None
    token: int
    n_bytes: float
    replicate: bool


class SimEngine(SubjobRuns):
    """Runs a list of jobs through a built :class:`Scheduler` on a simulated cluster."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        replacement: Replacement = LRU,
        check_conservation: bool = False,
        faults: NodeFaults | None = None,
        record_packets: bool = False,
        warm: Mapping[int, IntervalSet] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self._warm = dict(warm or {})
        """Node -> what its cache holds at the start (not pinned: a live cluster's caches)."""
        self.space = scheduler.space
        self.cost = scheduler.cost
        self.replacement = replacement
        self.caches: list[NodeCache] = [
            new_cache(self.space, node.cache_bytes, replacement)
            for node in scheduler.topology.nodes
        ]
        self._file_grain = self.space.grain is CacheGrain.FILE
        self._world: CacheDirectory | None = None
        self._runs: list[_Run | None] = [None] * scheduler.n_slots
        """Slot -> the subjob running there (a list: looked up per event)."""
        self._fetching: dict[int, FileFetch] = {}
        """File -> its last whole-file fetch from tertiary storage (sim/fetches.py)."""
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = itertools.count()
        self._versions = itertools.count()
        self._rates: dict[tuple[int, float, float | None], tuple[float, float, float]] = {}
        self._slot_node = scheduler.slot_node
        self._default_rates = [
            scheduler.topology.rates(n.node_id, self.cost, self.space.bytes_per_event)
            for n in scheduler.topology.nodes
        ]
        """Per node, seconds per event by source for jobs of the cost model's CPU time."""
        self._network = Network()
        self._pins: dict[int, tuple[NodeCache, int]] = {}
        self._faults: FaultStream | None = faults.stream() if faults is not None else None
        self._down: set[int] = set()
        self._check = check_conservation
        self._jobs: dict[int, Job] = {}
        self.now = 0.0
        self._scheduler_s = 0.0
        self._readers = {} if self.cost.shared_disks else None
        self._disk_readers = {}
        self._record_packets = record_packets
        self._follow_up: FollowUp | None = None
        self._followers: list[Job] = []
        self._follow_pending = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(
        self,
        jobs: Sequence[Job],
        *,
        measure: tuple[int, int] | None = None,
        max_backlog: int | None = None,
        follow_up: FollowUp | None = None,
    ) -> SimRun:
        """Simulate until every job has completed or failed (or the backlog passes
        ``max_backlog``).

        ``measure`` is the half-open range of job indices whose statistics count (warm-up and
        cool-down excluded); its submit times bound the window for slot utilisation.
        ``follow_up`` makes the workload closed: each completed job may bring its user's next
        one (PROOF's users, who run one query after another); those jobs are not measured.
        Files whose replicas name a node (``node:ID``) lie on that node's disk from the start
        (pinned there: a file server's own data), and the scheduler hears of them first; then
        what ``warm`` puts in each node's cache (unpinned, as a live cluster's caches are).
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
        if self._record_packets:
            rec.run.packets = []
        self._follow_up = follow_up
        self._place_replicas()
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
            if kind == _ARRIVAL:
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
                handled += self._dispatch(JobArrived(t, jobs[a]))
            elif kind == _TICK and (held := metrics.held_jobs()) > 0:
                # A wake-up while the policy holds jobs: the end of a period, maybe.
                residual = len(sched.jobs) - held
                handled += self._dispatch(Tick(t))
                released = held - metrics.held_jobs()
                if released > 0:
                    rec.release(t, residual, released)
                continue
            elif kind == _FAIL:
                handled += self._fail(a)
                if arrived == len(jobs) and not sched.jobs and not self._follow_pending:
                    break
                continue
            elif kind == _FOLLOW:
                self._follow_pending -= 1
                handled += self._dispatch(JobArrived(t, self._followers[a]))
            elif kind == _REPAIR:
                handled += self._dispatch(self._repair(a))
            else:
                handled += self.step_entry(kind, a, b)
                if kind in (_TRANSFER, SEGMENT):
                    continue
            if (
                self._faults is not None
                and arrived == len(jobs)
                and not sched.jobs
                and not self._follow_pending
            ):
                break  # faults go on for ever; the work is done
        self.result = rec.close(self.now, handled, self._scheduler_s, metrics.counters())
        return self.result

    def step_entry(self, kind: int, a: int, b: int) -> int:
        """Act on a heap entry of a kind every engine built on this one has (a subjob's
        end, a transfer's, the end of a stretch read from one disk, a wake-up), at
        ``self.now``; the events handled. Entries superseded since are skipped."""
        if kind == _FINISH:
            run = self._runs[a]
            if run is None or run.version != b:
                return 0  # superseded by a preemption or a re-timing
            return self._dispatch(self._leave(a, finished=True))
        if kind == _TRANSFER:
            move = self._network.transfers.get(a)
            if move is None or move.version != b:
                return 0  # re-rated since: a later entry stands for it
            return self._dispatch(self._moved(a))
        if kind == SEGMENT:
            self._disk_boundary(a, b)
            return 0
        if kind == _TICK:
            return self._dispatch(Tick(self.now))
        raise RuntimeError(f"unexpected heap entry of kind {kind}")

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
            if self._follow_up is not None:
                self._follow(action)
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

    def _follow(self, done: JobCompleted) -> None:
        """A closed workload's next job, submitted by the user whose job just completed."""
        assert self._follow_up is not None
        job = self._follow_up(self._jobs[done.job_id], self.now)
        if job is None:
            return
        if job.job_id in self._jobs:
            raise ValueError(f"follow_up: job {job.job_id} was submitted before")
        job = replace(job, submit_s=max(job.submit_s, self.now))
        self._jobs[job.job_id] = job
        self.rec.add_job(job)
        self._followers.append(job)
        self._follow_pending += 1
        entry = (job.submit_s, next(self._seq), _FOLLOW, len(self._followers) - 1, 0)
        heapq.heappush(self._heap, entry)

    def _place_replicas(self) -> None:
        """Put the files whose replicas name a node on that node's disk, pinned, and tell
        the scheduler (a CacheChanged per node, at the start)."""
        nodes = {node_endpoint(n.node_id): n.node_id for n in self.scheduler.topology.nodes}
        placed: dict[int, list[tuple[int, int]]] = {}
        for f in self.space.files:
            for where in f.replicas:
                node = nodes.get(where)
                if node is not None and f.n_events:
                    placed.setdefault(node, []).append((f.start, f.stop))
        for node in sorted(placed):
            data = IntervalSet(placed[node])
            cache = self.caches[node]
            added, _ = cache.insert(data, self.now)
            if cache.lookup(data) != data:
                raise ValueError(
                    f"replicas: the files placed on node {node} do not fit in its "
                    f"{cache.capacity_bytes:g} bytes"
                )
            cache.pin(data)
            if self._world is not None:
                self._world.add(node, added)
            self._dispatch(CacheChanged(self.now, node, added=added))
        for node in sorted(self._warm):
            added, _ = self.caches[node].insert(self._warm[node], self.now)
            if added:
                if self._world is not None:
                    self._world.add(node, added)
                self._dispatch(CacheChanged(self.now, node, added=added))

    def _log_packet(
        self, run: _Run, slot: int, processed: IntervalSet, by_source: tuple[int, int, int]
    ) -> None:
        """Record a subjob that left its slot as PROOF's monitoring records a packet."""
        assert self.rec.run.packets is not None
        n = processed.length
        source = max(range(3), key=by_source.__getitem__)
        peer = next((s[4] for s in run.segments if s[3] is Source.PEER and s[0] < s[1]), -1)
        job = self._jobs[run.subjob.job_id]
        cpu = self.cost.cpu_s_per_event if job.cpu_s_per_event is None else job.cpu_s_per_event
        first = processed.start if processed else run.subjob.data.start
        self.rec.run.packets.append(
            PacketRecord(
                job_id=job.job_id,
                slot=slot,
                node=self._slot_node[slot],
                start_s=run.start_s,
                end_s=self.now,
                events=n,
                file=self.space.file_at(first) if self.space.n_events else 0,
                source=source,
                peer=peer,
                n_bytes=self.space.bytes_of(processed),
                cpu_s=n * cpu,
                finished=processed.length == run.subjob.data.length,
            )
        )

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
            run = self._runs[slot] if slot < len(self._runs) else None
            if run is None:
                continue
            self._runs[slot] = None
            self._fetches_dropped(slot, run, stopping=True)
            if self._readers is not None:
                self._disk_leave(slot)
            processed, rest, by_source, _ = self._progress(run, finished=False)
            if self._record_packets:
                self._log_packet(run, slot, processed, by_source)
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
