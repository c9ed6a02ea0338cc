"""The scheduling core: a pure state machine, ``handle(event) -> list[Action]``.

It holds the master's view of the cluster (ponce-hersch §2.3: scheduling runs on a dedicated
master node): jobs, the whole-job queue, running and parked subjobs, free slots, fetches in
flight and the cache directory. A :class:`~datasched.core.policy.Policy` decides; the
scheduler keeps the books so that the subjobs of every job always partition what is left of
it, which is what makes "every event processed exactly once" hold whatever the policy does.

Suspending a running subjob is a two-step exchange, the same in every engine: the scheduler
sends Preempt, the engine answers SubjobStopped with the unprocessed remainder (at once in the
simulator, at a packet boundary in the runtime); the remainder goes back to the policy
(:meth:`Policy.work_returned`) and the replacement the policy named takes the slot. Splitting
is the same exchange with Shrink and SubjobShrunk: the engine gives up part of what is left,
the subjob runs on with the rest, and the released part starts on the slot reserved for it.
Pending exchanges are records (which subjob replaces which, which slot a split goes to), not
closures, so the state can be inspected.

No work is ever stranded: whatever comes back unprocessed (a preempted rest, a lost node's
work, a stop the engine made on its own) is handed to the policy's ``work_returned``, whose
default parks it with its job; a slot the policy leaves idle is given parked work; and if the
cluster ever stands still with work left (no slot busy, no answer or wake-up awaited, a slot
free) the scheduler raises :class:`SchedulerError` naming the policy, instead of hanging.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from datasched.core.actions import (
    Action,
    JobCompleted,
    JobFailed,
)
from datasched.core.commands import Commands
from datasched.core.data import DataSpace
from datasched.core.directory import CacheDirectory
from datasched.core.events import (
    CacheChanged,
    Event,
    FetchDone,
    JobArrived,
    JobCancelled,
    NodeJoined,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
    TransferDone,
    WorkRequested,
)
from datasched.core.hot import HotReplicator
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Subjob, Topology
from datasched.core.policy import Policy, Returned
from datasched.core.state import JobState, Running, SchedulerError

__all__ = ["JobState", "Running", "Scheduler", "SchedulerError"]

_EMPTY = IntervalSet()


class Scheduler(Commands):
    """The master's state machine; one instance per cluster and policy."""

    def __init__(
        self,
        topology: Topology,
        space: DataSpace,
        policy: Policy,
        *,
        cost: CostModel | None = None,
        min_subjob_events: int = 10,
        replicator: HotReplicator | None = None,
    ) -> None:
        if min_subjob_events < 1:
            raise ValueError(f"min_subjob_events: must be positive, got {min_subjob_events!r}")
        self.topology = topology
        self.space = space
        self.cost = cost if cost is not None else CostModel()
        self.policy = policy
        self.replicator = replicator
        """Replicates hot files beside the policy (ranganathan-foster's Dataset Scheduler)."""
        self.min_subjob_events = min_subjob_events
        self.now = 0.0
        self.jobs: dict[int, JobState] = {}
        self.job_queue: deque[int] = deque()
        """Jobs queued whole (not started), first come first served."""
        self.running: dict[int, Running] = {}
        """Slot -> the subjob running there."""
        self.directory = CacheDirectory(topology.n_nodes)
        self.completed = 0
        self.failed = 0
        self.slot_node: list[int] = []
        """Slot -> its node (read-only for policies and engines; extended as nodes join)."""
        self.node_slots: list[list[int]] = []
        """Node -> its slots."""
        self.node_running: list[int] = []
        """Node -> how many of its slots run a subjob."""
        self._nodes: list[int] = []
        self._lost: set[int] = set()
        self._idle: list[int] = []
        self._reserved: set[int] = set()
        self._rates: list[tuple[float, float, float]] = []
        for node in topology.nodes:
            self.node_slots.append(self._new_slots(node.node_id, node.slots))
            self.node_running.append(0)
            self._rates.append(self._node_rates(node.node_id))
            self._nodes.append(node.node_id)
        self._idle = [s for slots in self.node_slots for s in slots]
        self._replacements: dict[int, Subjob] = {}
        """Preempted subjob -> the subjob to start on its slot once it has stopped."""
        self._splits: dict[int, int] = {}
        """Shrinking subjob -> the reserved slot its released part starts on."""
        self._parked: set[int] = set()
        """Ids of the subjobs parked with their jobs (``JobState.suspended``)."""
        self._fetches: dict[int, list[IntervalSet]] = {}
        """Node -> what is being fetched or copied into its cache, one entry per request."""
        self._transfers = 0
        self._pins: dict[int, tuple[int, IntervalSet]] = {}
        self._pin_ids = itertools.count()
        self._wakes = 0
        """WakeAts not answered by a Tick yet."""
        self._subjob_ids: Iterator[int] = itertools.count()
        self.left_cpu_s: dict[int, float] = {}
        """Slot -> the CPU seconds of the subjob that last left it, where its engine measured
        them (``SubjobFinished.cpu_s``); no entry: not measured."""
        self._out: list[Action] = []
        self._freed: list[tuple[int, JobState | None]] = []
        self._by_end = None
        self._reads = policy.reads
        all_rates = [s for rates in self._rates for s in rates]
        self.fastest_s_per_event = min(all_rates)
        """The least time per event any read can take (a bound for policies' estimates)."""
        self.slowest_s_per_event = max(all_rates)
        """The most time per event any read can take."""
        self._handlers: dict[type, Callable[[Any], None]] = {
            SubjobFinished: self._on_finished,
            SubjobShrunk: self._on_shrunk,
            JobArrived: self._on_arrived,
            SubjobStopped: self._on_stopped,
            WorkRequested: self._on_work_requested,
            CacheChanged: self._on_cache_changed,
            FetchDone: self._on_fetch_done,
            TransferDone: self._on_transfer_done,
            NodeJoined: self._on_node_joined,
            NodeLost: self._on_node_lost,
            JobCancelled: self._on_cancelled,
            Tick: self._on_tick,
        }
        policy.bind(self)

    def _new_slots(self, node: int, n: int) -> list[int]:
        first = len(self.slot_node)
        self.slot_node.extend([node] * n)
        return list(range(first, first + n))

    def _node_rates(self, node: int) -> tuple[float, float, float]:
        return self.topology.rates(node, self.cost, self.space.bytes_per_event)

    # -- the one entry point ------------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Take one event, return the actions it calls for (in the order to carry them out)."""
        if event.time < self.now:
            raise SchedulerError(f"event at {event.time} is earlier than {self.now}")
        self.now = event.time
        out: list[Action] = []
        self._out = out
        self._handlers[type(event)](event)
        self._offer_freed()
        if self.replicator is not None:
            self.replicator.observe(self, event, out)
        if not self.running and self.jobs and self._idle:
            self._check_not_stranded()
        return out

    # -- event handlers -----------------------------------------------------------------------

    def _on_arrived(self, ev: JobArrived) -> None:
        job = ev.job
        if job.job_id in self.jobs:
            raise SchedulerError(f"job {job.job_id} arrived twice")
        if job.data and job.data.stop > self.space.n_events:
            raise SchedulerError(
                f"job {job.job_id}: events up to {job.data.stop} are beyond the data space "
                f"({self.space.n_events} events)"
            )
        js = JobState(job)
        self.jobs[job.job_id] = js
        if job.n_events == 0:
            self._complete(js)
            return
        self.policy.job_arrived(self, js)

    def _on_finished(self, ev: SubjobFinished) -> None:
        self._left_cpu(ev.slot, ev.cpu_s)
        self._subjob_left(ev.slot, ev.subjob_id, None, ev.cache_added, ev.cache_evicted)

    def _on_stopped(self, ev: SubjobStopped) -> None:
        self._left_cpu(ev.slot, ev.cpu_s)
        self._subjob_left(ev.slot, ev.subjob_id, ev.remaining, ev.cache_added, ev.cache_evicted)

    def _left_cpu(self, slot: int, cpu_s: float | None) -> None:
        if cpu_s is None:
            self.left_cpu_s.pop(slot, None)
        else:
            self.left_cpu_s[slot] = cpu_s

    def _subjob_left(
        self,
        slot: int,
        subjob_id: int,
        remaining: IntervalSet | None,
        added: IntervalSet,
        evicted: IntervalSet,
    ) -> None:
        """Book a subjob that left ``slot``: finished (``remaining`` None) or stopped."""
        r = self.running.get(slot)
        if r is None or r.subjob.subjob_id != subjob_id:
            raise SchedulerError(f"subjob {subjob_id} is not running on slot {slot}")
        sj = r.subjob
        if remaining is None:
            remaining = _EMPTY
        elif not remaining.issubset(sj.data):
            raise SchedulerError(f"subjob {subjob_id}: remainder is not part of its data")
        del self.running[slot]
        js = self.jobs[sj.job_id]
        del js.live[subjob_id]
        js.running_slots.discard(slot)
        js.done_events += sj.data.length - remaining.length
        node = self.slot_node[slot]
        self.node_running[node] -= 1
        if evicted:
            self.directory.remove(node, evicted)
        if added:
            self.directory.add(node, added)
        insort(self._idle, slot)
        # A Preempt that crossed a finish still gets its replacement started.
        replacement = self._replacements.pop(subjob_id, None) if self._replacements else None
        if remaining and not js.cancelled:
            rest = self.new_subjob(
                js, remaining, cached_on=sj.cached_on, preemptible=sj.preemptible
            )
            self.policy.work_returned(
                self, rest, Returned.PREEMPTED if r.stopping else Returned.STOPPED
            )
        if replacement is not None:
            self._start_replacement(replacement, slot)
        self._after_subjob(js)
        if self.is_idle(slot):
            self._freed.append((slot, js))

    def _return(self, sj: Subjob, cause: Returned) -> None:
        """Hand work back to the policy. Unless the policy asked for it (a preemption, whose
        rest it places knowingly), every free slot then gets a chance at it: the policy may
        have queued it where no slot will ask."""
        self.policy.work_returned(self, sj, cause)
        if cause is not Returned.PREEMPTED:
            self._freed.extend((slot, None) for slot in self._idle)

    def _start_replacement(self, sj: Subjob, slot: int) -> None:
        js = self.jobs.get(sj.job_id)
        if js is not None and sj.subjob_id in js.live and not js.cancelled:
            self.start(sj, slot)

    def _on_shrunk(self, ev: SubjobShrunk) -> None:
        r = self.running.get(ev.slot)
        if r is None or r.subjob.subjob_id != ev.subjob_id:
            # It left the slot first (a lost worker's packets): its rest was returned then,
            # and an engine cannot release anything from it any more.
            if ev.released:
                raise SchedulerError(f"subjob {ev.subjob_id} released events after it left")
            return
        if not r.shrinking:
            raise SchedulerError(f"subjob {ev.subjob_id} on slot {ev.slot} was not being shrunk")
        sj = r.subjob
        released = ev.released
        if not released.issubset(sj.data):
            raise SchedulerError(f"subjob {ev.subjob_id}: released events are not part of its data")
        r.shrinking = False
        js = self.jobs[sj.job_id]
        if released:
            r.subjob = sj.shrunk(released)
            js.live[sj.subjob_id] = r.subjob
            r.end_s = r.start_s + r.subjob.data.length * r.s_per_event
        self._push_end(r)
        target = self._splits.pop(sj.subjob_id)
        if not released:
            # The estimate was off (it had been processed): no split. Not offering the
            # target again now keeps the policy from asking for the same split in a loop.
            self._release_slot(target, offer=False)
            return
        if js.cancelled:
            self._release_slot(target)
            return
        node = self.slot_node[target]
        if node in self._lost:
            rest = self.new_subjob(js, released, cached_on=sj.cached_on, preemptible=True)
            self._return(rest, Returned.NODE_LOST)
            return
        # The moved part keeps naming the node that caches it (its queue of origin, for
        # out-of-order scheduling), unless the target's node caches it itself.
        on_target = released.issubset(self.directory.content(node))
        cached_on = node if on_target else sj.cached_on
        self.start(self.new_subjob(js, released, cached_on=cached_on, preemptible=True), target)

    def _on_work_requested(self, ev: WorkRequested) -> None:
        # A busy slot asking ahead is not modelled: one subjob a slot.
        if self.is_idle(ev.slot):
            self._freed.append((ev.slot, None))

    def _on_cache_changed(self, ev: CacheChanged) -> None:
        if ev.node in self._lost:
            return
        self.directory.remove(ev.node, ev.evicted)
        self.directory.add(ev.node, ev.added)

    def _on_fetch_done(self, ev: FetchDone) -> None:
        self._arrived(ev.node, ev.data, ev.added, ev.evicted)

    def _on_transfer_done(self, ev: TransferDone) -> None:
        self._arrived(ev.node, ev.data, ev.added, ev.evicted)

    def _arrived(
        self, node: int, data: IntervalSet, added: IntervalSet, evicted: IntervalSet
    ) -> None:
        pending = self._fetches.get(node)
        if not pending or node in self._lost:
            return  # its node was lost meanwhile: forgotten then
        try:
            pending.remove(data)
        except ValueError:
            raise SchedulerError(f"node {node}: no transfer of {data} was in flight") from None
        self._transfers -= 1
        self.directory.remove(node, evicted)
        self.directory.add(node, added)
        self.policy.data_arrived(self, node, added)

    def _on_tick(self, ev: Tick) -> None:
        if self._wakes > 0:
            self._wakes -= 1
        self.policy.tick(self)

    def _on_node_joined(self, ev: NodeJoined) -> None:
        spec = ev.node
        node = spec.node_id
        if node < len(self.node_slots):
            if node not in self._lost:
                raise SchedulerError(f"node {node} joined while still in the cluster")
            self._lost.discard(node)
            if len(self.node_slots[node]) != spec.slots:
                self.node_slots[node] = self._new_slots(node, spec.slots)
            self.topology = self.topology.with_node(spec)
            self._rates[node] = self._node_rates(node)
        else:
            if node != len(self.node_slots):
                raise SchedulerError(f"a new node must be numbered {len(self.node_slots)}")
            self.topology = self.topology.with_node(spec)
            self.directory.add_node()
            self.node_slots.append(self._new_slots(node, spec.slots))
            self.node_running.append(0)
            self._rates.append(self._node_rates(node))
        insort(self._nodes, node)
        self.policy.node_joined(self, node)
        for slot in self.node_slots[node]:
            insort(self._idle, slot)
            self._freed.append((slot, None))

    def _on_node_lost(self, ev: NodeLost) -> None:
        """A node died: what its subjobs had not processed goes back to the policy."""
        node = ev.node
        if node in self._lost:
            return
        remaining = dict(ev.remaining)
        self._lost.add(node)
        self._nodes.remove(node)
        self.node_running[node] = 0
        returned: list[Subjob] = []
        touched: list[JobState] = []
        for slot in self.node_slots[node]:
            i = bisect_left(self._idle, slot)
            if i < len(self._idle) and self._idle[i] == slot:
                del self._idle[i]
            self._reserved.discard(slot)
            r = self.running.pop(slot, None)
            if r is None:
                continue
            sj = r.subjob
            rest = remaining.get(slot, sj.data)
            if not rest.issubset(sj.data):
                raise SchedulerError(f"subjob {sj.subjob_id}: remainder is not part of its data")
            js = self.jobs[sj.job_id]
            del js.live[sj.subjob_id]
            js.running_slots.discard(slot)
            js.done_events += sj.data.length - rest.length
            replacement = self._replacements.pop(sj.subjob_id, None)
            if replacement is not None:
                rjs = self.jobs.get(replacement.job_id)
                if rjs is not None and replacement.subjob_id in rjs.live:
                    returned.append(replacement)
            target = self._splits.pop(sj.subjob_id, None)
            if target is not None:
                self._release_slot(target)
            if rest and not js.cancelled:
                cached_on = None if sj.cached_on == node else sj.cached_on
                returned.append(self.new_subjob(js, rest, cached_on=cached_on))
            touched.append(js)
        self._transfers -= len(self._fetches.pop(node, ()))
        for token in [t for t, (n, _) in self._pins.items() if n == node]:
            del self._pins[token]
        self.directory.clear(node)
        self.policy.node_lost(self, node)
        for sj in returned:
            self._return(sj, Returned.NODE_LOST)
        for js in touched:
            self._after_subjob(js)

    def _on_cancelled(self, ev: JobCancelled) -> None:
        js = self.jobs.get(ev.job_id)
        if js is None or js.cancelled:
            return  # done already, or unknown: nothing to cancel
        js.cancelled = True
        js.cancel_reason = ev.reason
        if js.job_id in self.job_queue:
            self.job_queue.remove(js.job_id)
        self.policy.job_cancelled(self, js)
        for sj in js.suspended:
            self._parked.discard(sj.subjob_id)
        js.suspended.clear()
        running = {self.running[s].subjob.subjob_id for s in js.running_slots}
        for subjob_id in [i for i in js.live if i not in running]:
            del js.live[subjob_id]
        for slot in sorted(js.running_slots):
            if self.running[slot].settled:
                self.preempt(slot)
        self._after_subjob(js)

    # -- completion ---------------------------------------------------------------------------

    def _after_subjob(self, js: JobState) -> None:
        if js.cancelled:
            if not js.running_slots and js.job_id in self.jobs:
                del self.jobs[js.job_id]
                self.failed += 1
                self._out.append(JobFailed(js.job_id, self.now, js.cancel_reason, js.done_events))
            return
        if not js.live and js.done_events == js.job.n_events:
            self._complete(js)
        elif js.done_events > js.job.n_events:
            raise SchedulerError(f"job {js.job_id}: more events processed than it has")

    def _complete(self, js: JobState) -> None:
        del self.jobs[js.job_id]
        self.completed += 1
        first = js.first_start_s if js.first_start_s is not None else self.now
        released = js.released_s if js.released_s is not None else -1.0
        self._out.append(JobCompleted(js.job_id, self.now, first, released))

    # -- offering free slots ------------------------------------------------------------------

    def _offer_freed(self) -> None:
        # Slots freed while handling this event are offered to the policy one by one, after
        # the books are straight; offering may free more (a preemption answered at once).
        while self._freed:
            slot, ended = self._freed.pop(0)
            if not self.is_idle(slot):
                continue
            self.policy.work_requested(self, slot, ended)
            if self._parked and self.is_idle(slot):
                # The policy left it idle: parked work (returned, suspended) must not wait
                # for ever for a policy that does not look at it.
                self.start(self._oldest_parked(), slot)

    def _oldest_parked(self) -> Subjob:
        for js in self.jobs.values():
            if js.suspended:
                return js.suspended[0]
        raise SchedulerError("parked subjobs are counted but none is found")

    def _check_not_stranded(self) -> None:
        """Nothing runs, a slot is free, yet jobs are in the system: fine only while the
        policy waits for a wake-up, an answer or a transfer it asked for."""
        if self._wakes or self._transfers or self._replacements or self._splits:
            return
        waiting = sorted(self.jobs)[:5]
        raise SchedulerError(
            f"policy {self.policy.name or type(self.policy).__name__!r} left work stranded: "
            f"jobs {waiting} wait with {len(self._idle)} slots free and nothing running"
        )
