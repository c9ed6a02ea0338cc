"""The simulated engine: a ``heapq`` discrete-event loop that drives the scheduling core.

Events are ordered by ``(time, seq)`` (SimPy's habit: the counter makes ties deterministic).
A running subjob costs one heap entry, not one per collision event: when it starts, its data is
cut into segments by where each event is read from (own cache, a peer's cache, tertiary
storage), each with its time per event from the cost model, so its end time, and on preemption
exactly how many events it has processed, follow in closed form (ponce-hersch §2.3, docs/design.md).
Where caches hold whole files, a file read from tertiary storage is first fetched whole (a
segment of no events lasting its transfer), then read from the local disk, as the runtime does.

Node caches are the world's truth; what a subjob read goes into its node's cache when it stops or
ends, and the change is reported to the scheduler with that event. Preempt, Shrink and Evict take
effect at once, inside the same instant; their answers are follow-up events, handled after the
other actions of the event that caused them (:mod:`datasched.core.dispatch`'s order, the runtime's
too). Fetches and replications move bytes over the topology's links as a fluid
(:mod:`datasched.sim.network`). Nodes may fail and come back (:mod:`datasched.sim.faults`). What
the run measures is the :class:`~datasched.sim.recorder.Recorder`'s business; this module is the
loop and the world it simulates.

Three things are off unless asked for, and change nothing when off: disks shared by their readers
(``CostModel.shared_disks``, :mod:`datasched.sim.disks`), a log of every subjob as PROOF logs
packets (``record_packets``), and closed workloads (``follow_up``: a user submits the next job when
the last ends). Files whose replicas name a node lie on its disk from the start.

Length: the loop and the world it changes (nodes lost and back, caches, warm starts) are one
state; the subjobs' timing, the data moves and the master's queue are mixins of their own.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from datasched.core.actions import (
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    JobHeld,
    JobReleased,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    Unpin,
    WakeAt,
)
from datasched.core.cache import NodeCache, new_cache
from datasched.core.data import CacheGrain
from datasched.core.directory import CacheDirectory
from datasched.core.dispatch import EventPump
from datasched.core.events import (
    ArrivalsClosed,
    CacheChanged,
    Event,
    JobArrived,
    NodeJoined,
    NodeLost,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Source, node_endpoint
from datasched.core.packets import PacketDepth
from datasched.core.replacement import LRU, Replacement
from datasched.core.scheduler import Scheduler
from datasched.sim.faults import FaultStream, NodeFaults
from datasched.sim.fetches import FileFetch
from datasched.sim.moves import Move
from datasched.sim.network import Network
from datasched.sim.recorder import JobRecordTimes, PacketRecord, Recorder, Release, SimRun
from datasched.sim.state import MASTER_TURN, Kind
from datasched.sim.subjobs import SubjobRuns, _Run

__all__ = ["FollowUp", "JobRecordTimes", "PacketRecord", "Release", "SimEngine", "SimRun"]

# The heap's kinds as plain ints: the loop compares every entry's (see Kind's docstring).
_ARRIVAL, _FINISH, _TICK, _TRANSFER = (
    int(k) for k in (Kind.ARRIVAL, Kind.FINISH, Kind.TICK, Kind.TRANSFER)
)
_FAIL, _REPAIR, _SEGMENT, _FOLLOW = (
    int(k) for k in (Kind.FAIL, Kind.REPAIR, Kind.SEGMENT, Kind.FOLLOW)
)

FollowUp = Callable[[Job, float], "Job | None"]
"""A closed workload's rule: given a job that completed and when, the job its user submits
next (None: none)."""
_EMPTY = IntervalSet()


_GC_YOUNG = 50_000
"""Allocations between young-generation collections during a run (Python's default: 700)."""


@contextlib.contextmanager
def _tuned_gc() -> Iterator[None]:
    """Garbage collection tuned for the simulator's allocation pattern during a run.

    A run allocates millions of short-lived tuples, events and IntervalSets and keeps a heap
    that grows with the cluster (caches, the cache directory). With Python's defaults, every
    700 allocations promote whatever is alive at that moment, so transient objects reach the
    old generation and trigger full collections that walk the whole heap: 16 % of a
    1,000-node out-of-order run (docs/performance.md, "Cost per event as the cluster
    grows"). Here the young generation is collected every ``_GC_YOUNG`` allocations, and what
    existed before the run (imports, the workload) is frozen out of the collector's walks
    when nothing else froze objects (``gc.freeze`` is process-wide; a caller's freeze is left
    alone). Both are undone at the end; collection itself stays on (cycles are still freed).
    """
    threshold = gc.get_threshold()
    freeze = gc.isenabled() and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(threshold[0], _GC_YOUNG), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freeze:
            gc.unfreeze()


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
        in_flight: PacketDepth | None = None,
        warm_users: Mapping[int, Iterable[str]] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self._warm = dict(warm or {})
        """Node -> what its cache holds at the start (not pinned: a live cluster's caches)."""
        self._user_ready = {(n, u) for n, users in (warm_users or {}).items() for u in users}
        """(node, user) pairs whose setup is paid (``CostModel.user_setup_s``): at the start,
        a live cluster's warm sandboxes; then every pair that has run."""
        keep = scheduler.cost.user_sandboxes_kept
        self._user_recent = {
            n: dict.fromkeys(list(users)[-keep:] if keep else users)
            for n, users in (warm_users or {}).items()
        }
        """Per node, its warm users, the least recently run first (``warm_users`` gives
        them in that order; with ``CostModel.user_sandboxes_kept``, the most recent that
        many): what ``user_sandboxes_kept`` keeps."""
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
        self._arrivals: list[Job] = []
        """The run's own jobs, in order of arrival (:meth:`run`)."""
        self._arrived = 0
        self._max_backlog: int | None = None
        self._halt = False
        self.now = 0.0
        self._pump = EventPump(scheduler, self, timer=time.perf_counter)
        """The one event order (core.dispatch): actions' answers are follow-ups."""
        self.rec = Recorder(
            [],
            n_nodes=scheduler.topology.n_nodes,
            n_slots=scheduler.n_slots,
            measure=(0, 0),
            bytes_per_event=self.space.uniform_bytes_per_event,
            check_conservation=check_conservation,
        )
        """What the run measures (replaced by :meth:`run`'s, for its list of jobs)."""
        self._readers = {} if self.cost.shared_disks else None
        self._master_setup(in_flight)
        self._disk_readers = {}
        self._record_packets = record_packets
        self._follow_up: FollowUp | None = None
        self._followers: list[Job] = []
        self._follow_pending = 0
        self._close_arrivals = False
        self._handled_before = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(
        self,
        jobs: Sequence[Job],
        *,
        measure: tuple[int, int] | None = None,
        max_backlog: int | None = None,
        follow_up: FollowUp | None = None,
        until: float = math.inf,
        close_arrivals: bool = False,
    ) -> SimRun:
        """Simulate until every job has completed or failed (or the backlog passes
        ``max_backlog``, or the next entry of the heap lies after ``until``).

        ``measure`` is the half-open range of job indices whose statistics count (warm-up and
        cool-down excluded); its submit times bound the window for slot utilisation.
        ``follow_up`` makes the workload closed: each completed job may bring its user's next
        one (PROOF's users, who run one query after another); those jobs are not measured.
        Files whose replicas name a node (``node:ID``) lie on that node's disk from the start
        (pinned there: a file server's own data), and the scheduler hears of them first; then
        what ``warm`` puts in each node's cache (unpinned, as a live cluster's caches are).
        ``close_arrivals``: tell the scheduler when the last job has arrived
        (:class:`ArrivalsClosed`), as the runtime does after a jobs file's last job; off, a
        simulation stands for an endless stream of which ``jobs`` are a part (the papers').

        The same as :meth:`begin`, :meth:`proceed` and :meth:`close` in turn; a caller that
        reports progress or stops on its own terms (``datasched sim``) calls them itself.
        """
        self.begin(
            jobs,
            measure=measure,
            max_backlog=max_backlog,
            follow_up=follow_up,
            close_arrivals=close_arrivals,
        )
        self.proceed(until)
        return self.close()

    def begin(
        self,
        jobs: Sequence[Job],
        *,
        measure: tuple[int, int] | None = None,
        max_backlog: int | None = None,
        follow_up: FollowUp | None = None,
        close_arrivals: bool = False,
    ) -> None:
        """Set up a run of ``jobs`` (as :meth:`run` does, before its loop): the recorder,
        the first arrival, the replicas placed, the first failures drawn."""
        if close_arrivals and follow_up is not None:
            raise ValueError("close_arrivals: a closed workload's users submit jobs to the end")
        self._close_arrivals = close_arrivals
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        self._arrivals = jobs = [jobs[i] for i in order]
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
        rec.watch(sched)
        if self._record_packets:
            rec.run.packets = []
        self._follow_up = follow_up
        self._max_backlog = max_backlog
        self._place_replicas()
        self._handled_before = self._pump.handled  # the placed replicas' are not counted
        heap = self._heap
        if jobs:
            heapq.heappush(heap, (jobs[0].submit_s, next(self._seq), _ARRIVAL, 0, 0))
        if self._faults is not None:
            for node in sched.nodes:
                self._schedule_failure(node)

    def proceed(self, until: float = math.inf, *, max_steps: int | None = None) -> bool:
        """Take heap entries, in order, while the next lies at or before ``until`` (and at
        most ``max_steps`` of them); whether the run is over: nothing is left to do, or the
        backlog passed its bound, or every job ended while faults go on for ever."""
        heap = self._heap
        # ``self._step()`` called, not bound once: compiled, a C call (sim/engine.pxd).
        with _tuned_gc():
            if max_steps is None:
                while heap and heap[0][0] <= until:
                    if self._step() and self._over():
                        return True
                return not heap
            for _ in range(max_steps):
                if not heap or heap[0][0] > until:
                    break
                if self._step() and self._over():
                    return True
            return not heap or self._halt

    @property
    def jobs_ended(self) -> int:
        """Jobs of the run that completed or failed so far."""
        return self.rec.ended

    def close(self, *, partial: bool = False) -> SimRun:
        """End the run where it stands (all done, or stopped by :meth:`proceed`'s bounds)
        and return what it measured. ``partial``: the caller stopped it with subjobs under
        way (``--until``, ``--max-jobs``, Ctrl-C), whose work up to now is booked
        (:meth:`book_running`)."""
        if partial:
            self.book_running()
        pump = self._pump
        handled = pump.handled - self._handled_before
        self.result = self.rec.close(self.now, handled, pump.scheduling_s)
        return self.result

    def book_running(self) -> None:
        """Book what each subjob still in its slot has done by now, as if it left now (its
        slot time, events by source, tertiary bytes), so that a partial run's utilisation
        and read ratios count the work under way, not only the subjobs that ended. Nothing
        else changes: the subjobs stay where they are, no packet is logged. A run that
        ended has none; one stopped by its backlog's bound does not call this."""
        for run in self._runs:
            if run is not None:
                processed, _, by_source, _ = self._progress(run, finished=False)
                self.rec.ran(
                    run.subjob.job_id,
                    run.start_s,
                    self.now,
                    by_source,
                    processed,
                    self._sized(run, processed),
                )

    def peek(self) -> float:
        """The time of the next heap entry (math.inf when there is none), as SimPy's
        ``Environment.peek``."""
        return self._heap[0][0] if self._heap else math.inf

    def step(self) -> None:
        """Take the next heap entry and act on it at its time, with every event it causes
        (SimPy's ``Environment.step``); an engine driven from outside (a grid's site) steps
        whenever :meth:`peek` is the earliest of its clock's."""
        if not self._heap:
            raise RuntimeError("step: nothing is scheduled (peek() is inf)")
        self._step()

    def submit(self, job: Job, now: float) -> None:
        """``job`` arrives at ``now`` from outside the engine's own list (an engine driven
        from outside, by :meth:`peek` and :meth:`step`); the clock moves to ``now``."""
        self.now = now
        self._jobs[job.job_id] = job
        self.rec.add_job(job)
        self._pump.handle(JobArrived(now, job))

    @property
    def handled(self) -> int:
        """Events handled by the scheduler so far."""
        return self._pump.handled

    def _step(self) -> bool:
        """Take the next heap entry (see :class:`~datasched.sim.state.Kind`); whether the run
        may be over after it (the loop then asks :meth:`_over`). Entries superseded since
        they were pushed are skipped."""
        t, _, kind, a, b = heapq.heappop(self._heap)
        self.now = t
        pump = self._pump
        if kind == _FINISH:
            run = self._runs[a]
            if run is not None and run.version == b:  # else: preempted or re-timed since
                pump.handle(self._leave(a, finished=True))
            return True
        if kind == _ARRIVAL:
            backlog = self.rec.arrival()
            if self._max_backlog is not None and backlog > self._max_backlog:
                self.rec.run.stopped_early = True
                self._halt = True
                return True
            jobs = self._arrivals
            self._arrived = a + 1
            if a + 1 < len(jobs):
                nxt = jobs[a + 1]
                heapq.heappush(self._heap, (nxt.submit_s, next(self._seq), _ARRIVAL, a + 1, 0))
            pump.handle(JobArrived(t, jobs[a]))
            if self._close_arrivals and a + 1 == len(jobs):
                pump.handle(ArrivalsClosed(t))
            return True
        if kind == _TRANSFER:
            move = self._network.transfers.get(a)
            if move is not None and move.version == b:  # else: re-rated since
                pump.handle(self._moved(a))
            return False
        if kind == _SEGMENT:
            self._disk_boundary(a, b)
            return False
        if kind == _TICK:
            rec = self.rec
            if rec.tick():  # the policy holds jobs: the end of a period, maybe
                pump.handle(Tick(t))
                rec.ticked(t)
                return False
            pump.handle(Tick(t))
            return True
        if kind == _FAIL:
            self._fail(a)
            return True
        if kind == _FOLLOW:
            self._follow_pending -= 1
            pump.handle(JobArrived(t, self._followers[a]))
            return True
        if kind == _REPAIR:
            pump.handle(self._repair(a))
            return True
        if kind == MASTER_TURN:
            self._master_turn(a, b)
            return False
        raise RuntimeError(f"unexpected heap entry of kind {kind}")

    def _over(self) -> bool:
        """Whether the run is over though entries are left: the backlog passed its bound,
        or every job has ended while faults go on for ever."""
        return self._halt or (
            self._faults is not None
            and self._arrived == len(self._arrivals)
            and not self.scheduler.jobs
            and not self._follow_pending
        )

    # -- the actions (core.dispatch.ActionHandler) ----------------------------------------------

    def on_start(self, action: Start | Assign) -> None:
        self._start(action)

    def on_preempt(self, action: Preempt) -> None:
        # The subjob stops now; the scheduler hears it after this event's other actions.
        self._pump.emit(self._leave(action.slot, finished=False))

    def on_shrink(self, action: Shrink) -> None:
        self._pump.emit(self._shrink(action))

    def on_wake_at(self, action: WakeAt) -> None:
        heapq.heappush(self._heap, (max(action.time, self.now), next(self._seq), _TICK, 0, 0))

    def on_job_completed(self, action: JobCompleted) -> None:
        self.rec.completed(action)
        if self._follow_up is not None:
            self._follow(action)

    def on_job_failed(self, action: JobFailed) -> None:
        self.rec.failed(action)

    def on_job_held(self, action: JobHeld) -> None:
        pass  # the recorder reads holds from the policy (held_jobs) and JobCompleted

    def on_job_released(self, action: JobReleased) -> None:
        pass

    def on_fetch(self, action: Fetch) -> None:
        self._begin_move(action.node, action.data, action.source, replicate=False)

    def on_replicate(self, action: Replicate) -> None:
        self._begin_move(action.node, action.data, action.source, replicate=True)

    def on_pin(self, action: Pin) -> None:
        cache = self.caches[action.node]
        self._pins[action.token] = (cache, cache.pin(action.data))

    def on_unpin(self, action: Unpin) -> None:
        pinned = self._pins.pop(action.token, None)
        if pinned is not None:
            pinned[0].unpin(pinned[1])

    def on_evict(self, action: Evict) -> None:
        self._pump.emit(self._evict(action.node, action.data))

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
            self._pump.handle(CacheChanged(self.now, node, added=added))
        for node in sorted(self._warm):
            added, _ = self.caches[node].insert(self._warm[node], self.now)
            if added:
                if self._world is not None:
                    self._world.add(node, added)
                self._pump.handle(CacheChanged(self.now, node, added=added))

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

    # -- nodes failing and coming back --------------------------------------------------------

    def _schedule_failure(self, node: int) -> None:
        assert self._faults is not None
        at = self.now + self._faults.time_to_failure_s()
        heapq.heappush(self._heap, (at, next(self._seq), _FAIL, node, 0))

    def _fail(self, node: int) -> None:
        """A fault of the run's :class:`NodeFaults`: the node is lost (:meth:`lose_node`) and
        back after the repair time."""
        assert self._faults is not None
        self.lose_node(node)
        at = self.now + self._faults.repair_s
        heapq.heappush(self._heap, (at, next(self._seq), _REPAIR, node, 0))

    def lose_node(self, node: int) -> None:
        """``node`` fails now: its subjobs stop where they are, its cache is gone, moves to or
        from it break off; the scheduler hears NodeLost (then the failed moves' answers)."""
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
                self._sized(run, processed),
            )
            for peer_cache, token in run.peer_pins:
                peer_cache.unpin(token)
            remaining.append((slot, rest))
        answers: list[Event] = []
        for transfer_id, t in list(self._network.transfers.items()):
            move = t.tag
            assert isinstance(move, Move)
            if move.node != node and move.source != node:
                continue
            _, changed = self._network.finish(transfer_id, self.now)
            self._rerated(changed)
            if move.node != node:
                answers.append(self._land(move, ok=False))  # its source is gone
        self.caches[node] = new_cache(
            self.space, sched.topology.nodes[node].cache_bytes, self.replacement
        )
        self._user_ready = {(n, user) for n, user in self._user_ready if n != node}
        self._user_recent.pop(node, None)
        if self._world is not None:
            self._world.clear(node)
        pump = self._pump
        pump.emit(NodeLost(self.now, node, tuple(remaining)))
        for ev in answers:
            pump.emit(ev)
        pump.pump()

    def _repair(self, node: int) -> NodeJoined:
        self._down.discard(node)
        self._schedule_failure(node)
        return NodeJoined(self.now, self.scheduler.topology.nodes[node])

    def rejoin_node(self, node: int) -> None:
        """``node``, lost, is back now, with an empty cache (the scheduler hears NodeJoined)."""
        self._down.discard(node)
        self._pump.handle(NodeJoined(self.now, self.scheduler.topology.nodes[node]))
