"""Out-of-order scheduling (ponce-hersch §4.1, Table 3).

Each node has a queue of subjobs whose data it caches; one more queue holds subjobs whose data
no node caches. Cached work runs first, and may displace non-cached work; idle slots take
non-cached work, then steal from the most loaded nodes. A fairness rule bounds how long a job
can wait in the no-cache queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import ClassVar

from datasched.core.intervals import IntervalSet
from datasched.core.model import Part, Subjob
from datasched.core.policy import DEFAULT, JobView, Param, Policy, ReadMode, Returned, SchedulerView
from datasched.policies.ponce.fcfs import cut_by_cache
from datasched.policies.registry import register

__all__ = ["REPLICATION_BLOCK", "OutOfOrder"]

REPLICATION_BLOCK = 1000
"""Events per block for counting remote accesses (the paper counts per "data segment")."""


@register
class OutOfOrder(Policy):
    """Out-of-order job scheduling by cache content (ponce-hersch Table 3), with optional
    replication (§4.2): with ``replication`` on, a node working on data another node caches
    reads it from that node's disk over the network instead of from tertiary storage, without
    caching it, until the data has been read remotely ``replicate_after`` times; that read
    copies it into the reader's cache.

    Where the table leaves room: a subjob displaced by cached work goes back to the front of
    the queue it came from (its data's node queue if it names one, else the no-cache queue),
    and so does work a lost node gives back (to the no-cache queue when that node cached it);
    an idle slot with nothing queued steals from the node with the most estimated work left
    (running plus queued): the tail of its last queued subjob, sized so both end together, or
    else a balanced split of its running subjob; stolen work is marked preemptible. The
    fairness rule fires when the oldest job of the no-cache queue has waited ``fairness_h``
    hours since submission: the next free slot runs it before anything else.
    """

    name = "out-of-order"
    section = "ponce-hersch §4.1, Table 3"
    summary = "out-of-order: cached work first, per-node queues, stealing, fairness bound"
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "fairness_h",
            float,
            48.0,
            "a job that has waited this many hours for uncached data runs on the next free "
            "slot (the fairness bound of Table 3)",
            low=0.0,
            low_open=True,
            unit="hours",
        ),
        Param(
            "replication",
            bool,
            False,
            "read data cached on another node from there (ponce-hersch §4.2)",
            option=False,
        ),
        Param(
            "replicate_after",
            int,
            3,
            "with replication: copy data into the reader's cache at its N-th remote read "
            "(giving it turns replication on)",
            low=1,
            implies=(("replication", True),),
            unit="reads",
        ),
    )

    def __init__(
        self,
        *,
        fairness_h: float = DEFAULT,
        replication: bool = DEFAULT,
        replicate_after: int = DEFAULT,
    ) -> None:
        self.fairness_s = fairness_h * 3600.0
        self.reads = ReadMode(cache_fill=True, peer_reads=replication)
        self.replicate_after = replicate_after
        self.remote_reads: dict[tuple[int, int], int] = {}
        """Remote accesses per (holder node, block of REPLICATION_BLOCK events)."""
        self.replications = 0
        """How many subjobs copied what they read from a peer into their own cache."""
        self.replicated_jobs: set[int] = set()
        """Jobs with at least one replicating subjob (ponce-hersch §4.2 counts per arrival)."""
        self.node_queues: dict[int, deque[Subjob]] = {}
        self.nocache: deque[Subjob] = deque()
        self.fairness_fired = 0
        """How many jobs the fairness rule started (each job counted once)."""
        self._fired_jobs: set[int] = set()
        self._s_cache = 0.0
        self._loads: list[tuple[float, int]] = []
        """Lazy max-heap of node loads: (-time the node would be done, node)."""
        self._listed: dict[int, float] = {}
        """Node -> the time of an entry of ``_loads`` known to be in the heap for it (see
        :meth:`_push_load`)."""

    def bind(self, sched: SchedulerView) -> None:
        self.node_queues = {n: deque() for n in sched.nodes}
        self._s_cache = sched.s_per_event_on(sched.slots_of(sched.nodes[0])[0], IntervalSet())

    # -- metrics (PolicyMetrics) ----------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        return {
            "fairness_fired": self.fairness_fired,
            "replications": self.replications,
            "replicated_jobs": len(self.replicated_jobs),
        }

    # -- arrival ------------------------------------------------------------------------------

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        uncached: list[IntervalSet] = []
        for data, holder in cut_by_cache(sched, js.job.data):
            if holder is None:
                uncached.append(data)
                continue
            sj = sched.new_subjob(js, data, cached_on=holder)
            slot = self._idle_slot_of(sched, holder)
            if slot is not None:
                sched.start(sj, slot)
                continue
            victim = self._displaceable(sched, holder)
            if victim is not None:
                self._displace(sched, victim, sj)
            else:
                self.node_queues[holder].append(sj)
                self._push_load(sched, holder)
        # Idle slots take the non-cached pieces, split so every idle slot gets a share.
        slot_node, queues = sched.slot_node, self.node_queues
        idle = [s for s in sched.idle_slots if not queues[slot_node[s]]]
        uncached.sort(key=lambda d: (-d.length, d.start))
        subjobs = self._spread(sched, js, uncached, len(idle))
        for slot, sj in zip(idle, subjobs, strict=False):
            sched.start(sj, slot)
        self.nocache.extend(subjobs[len(idle) :])

    @staticmethod
    def _idle_slot_of(sched: SchedulerView, node: int) -> int | None:
        slots = sched.node_slots[node]
        if sched.node_running[node] == len(slots):
            return None  # all busy: no slot to look at
        for slot in slots:
            if sched.is_idle(slot):
                return slot
        return None

    @staticmethod
    def _displaceable(sched: SchedulerView, node: int) -> int | None:
        """A slot of ``node`` running non-cached work that may be asked to stop."""
        running = sched.running
        for slot in sched.node_slots[node]:
            r = running.get(slot)
            if r is not None and r.settled and r.subjob.cached_on != node:
                return slot
        return None

    def _spread(
        self, sched: SchedulerView, js: JobView, pieces: list[IntervalSet], slots: int
    ) -> list[Subjob]:
        """Non-cached pieces cut into about ``slots`` subjobs (more pieces stay whole)."""
        if not pieces:
            return []
        counts = [1] * len(pieces)
        for _ in range(slots - len(pieces)):
            i = max(range(len(pieces)), key=lambda k: (pieces[k].length / counts[k], -k))
            if pieces[i].length < (counts[i] + 1) * sched.min_subjob_events:
                break
            counts[i] += 1
        parts = [
            p
            for piece, c in zip(pieces, counts, strict=True)
            for p in sched.split_even(piece, c, 1)
        ]
        return [sched.new_subjob(js, p) for p in parts]

    def _displace(self, sched: SchedulerView, slot: int, sj: Subjob) -> None:
        """Stop the non-cached subjob on ``slot`` and run the cached ``sj`` there; the
        stopped one's rest comes back through :meth:`work_returned`."""
        sched.preempt(slot, replacement=sj)

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        """Back to the front of the queue it came from; straight onto its node if that node
        has a free slot (a queue is served only when one of its slots frees: work queued
        on an idle node would wait for ever)."""
        if sj.cached_on is not None:
            slot = self._idle_slot_of(sched, sj.cached_on)
            if slot is not None:
                sched.start(sj, slot)
                return
        if sj.cached_on is not None and sj.cached_on not in sched.nodes:
            # Its node is lost: its queue is served by no slot, so it waits with uncached work.
            self.nocache.appendleft(sj)
            return
        self._queue_of(sj).appendleft(sj)
        if sj.cached_on is not None:
            self._push_load(sched, sj.cached_on)

    def _queue_of(self, sj: Subjob) -> deque[Subjob]:
        if sj.cached_on is None:
            return self.nocache
        return self.node_queues[sj.cached_on]

    # -- nodes and jobs coming and going ------------------------------------------------------

    def node_joined(self, sched: SchedulerView, node: int) -> None:
        self.node_queues.setdefault(node, deque())

    def node_lost(self, sched: SchedulerView, node: int) -> None:
        """The lost node's queue of cached work joins the front of the no-cache queue (its
        cache is gone), in its order."""
        queue = self.node_queues.get(node)
        if not queue:
            return
        # Its cache is gone: the same events, no longer cached anywhere.
        moved = [sched.resplit(sj, [Part(sj.data)])[0] for sj in queue]
        queue.clear()
        self.nocache.extendleft(reversed(moved))

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        for queue in (self.nocache, *self.node_queues.values()):
            kept = [sj for sj in queue if sj.job_id != js.job_id]
            if len(kept) != len(queue):
                queue.clear()
                queue.extend(kept)

    # -- a slot is free -----------------------------------------------------------------------

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        if self.nocache and self._overdue(sched, self.nocache[0]):
            sj = self.nocache.popleft()
            if sj.job_id not in self._fired_jobs:
                self._fired_jobs.add(sj.job_id)
                self.fairness_fired += 1
            sched.start(sj, slot)
            return
        queue = self.node_queues[sched.slot_node[slot]]
        if queue:
            sched.start(queue.popleft(), slot)
            return
        if self.nocache:
            self._take_nocache(sched, slot)
            return
        self._steal(sched, slot)

    def _overdue(self, sched: SchedulerView, sj: Subjob) -> bool:
        return sched.now - sched.jobs[sj.job_id].job.submit_s > self.fairness_s

    def _take_nocache(self, sched: SchedulerView, slot: int) -> None:
        """Run the first no-cache subjob, split across the other idle slots with nothing
        queued, if they would otherwise stay idle."""
        sj = self.nocache.popleft()
        helpers = [
            s for s in sched.idle_slots if s != slot and not self.node_queues[sched.slot_node[s]]
        ]
        if not helpers or len(self.nocache) >= len(helpers):
            sched.start(sj, slot)
            return
        parts = sched.split_even(sj.data, 1 + len(helpers))
        pieces = sched.resplit(sj, [Part(p, None, sj.preemptible) for p in parts])
        for piece, target in zip(pieces, [slot, *helpers], strict=False):
            sched.start(piece, target)

    def _done_at(self, sched: SchedulerView, node: int) -> float:
        """When ``node`` is estimated to have done its running subjobs and its queue (queued
        work is cached there: cache speed, shared by its slots). Constant while neither
        changes."""
        running = sched.running
        end: float | None = None
        slots = sched.node_slots[node]
        for slot in slots:
            r = running.get(slot)
            if r is not None and (end is None or r.end_s > end):
                end = r.end_s
        if end is None:
            end = sched.now
        queue = self.node_queues[node]
        if not queue:  # the common case: no generator to build
            return end
        return end + sum(sj.data.length for sj in queue) * self._s_cache / len(slots)

    def _push_load(self, sched: SchedulerView, node: int) -> None:
        """Record that ``node``'s load may have grown (a start, or work queued there).

        Nothing is pushed while an entry of the node at least as late is known to be in the
        heap: :meth:`_most_loaded` needs only an entry no earlier than each busy node's load,
        and a start that does not end after the node's other work (a balanced split's part,
        nearly every start at 1,000 nodes) would only add an entry to pop
        (docs/performance.md, "Cost per event as the cluster grows"). Every pop of a node's
        entry forgets what is known of it."""
        done = self._done_at(sched, node)
        listed = self._listed.get(node)
        if listed is not None and listed >= done:
            return
        self._listed[node] = done
        heapq.heappush(self._loads, (-done, node))

    def started(self, sched: SchedulerView, sj: Subjob, slot: int) -> None:
        self._push_load(sched, sched.slot_node[slot])

    def _most_loaded(self, sched: SchedulerView, node: int) -> tuple[int | None, float]:
        """The busy node (not ``node``) with the most work left, and that work in seconds.

        A lazy heap keyed by when each node would be done: a node's load only shrinks
        between the pushes made when it grows, so an entry that still matches its node's
        load at the top is the maximum; one that does not is re-pushed with the true value.
        O(log n) amortised instead of a scan of all nodes (ponce-hersch Table 5).
        """
        heap = self._loads
        skipped = []
        best: int | None = None
        best_load = 0.0
        busy = sched.node_running
        while heap:
            neg_done, other = heap[0]
            if not busy[other]:
                heapq.heappop(heap)  # idle: pushed again when it starts
                self._listed.pop(other, None)
                continue
            done = self._done_at(sched, other)
            if done != -neg_done:
                heapq.heapreplace(heap, (-done, other))
                self._listed[other] = done
                continue
            if other == node:
                skipped.append(heapq.heappop(heap))
                continue
            if done > sched.now:
                best, best_load = other, done - sched.now
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return best, best_load

    def _steal(self, sched: SchedulerView, slot: int) -> None:
        """Take work from the most loaded node, so both end at about the same time."""
        node = sched.slot_node[slot]
        best, best_load = self._most_loaded(sched, node)
        if best is None:
            return
        queue = self.node_queues[best]
        if queue:
            sj = queue.pop()
            a = sched.s_per_event_on(sched.node_slots[best][0], sj.data)
            b = sched.s_per_event_on(slot, sj.data)
            n_give = min(sj.data.length, int(best_load / (a + b)))
            if n_give < sched.min_subjob_events:
                queue.append(sj)
                return
            keep, give = sched.cut(sj.data, sj.data.length - n_give)
            moved = Part(give, best, preemptible=True)
            if keep:
                kept, taken = sched.resplit(sj, [Part(keep, sj.cached_on), moved])
                queue.append(kept)
            else:
                (taken,) = sched.resplit(sj, [moved])
            sched.start(taken, slot)
            return
        # The running subjob of ``best`` that ends last, if it may be asked to split.
        victim: int | None = None
        for other in sched.node_slots[best]:
            r = sched.running.get(other)
            if r is not None and (victim is None or r.end_s > sched.running[victim].end_s):
                victim = other
        if victim is not None and sched.running[victim].settled:
            sched.split_running(victim, slot)

    def read_mode(self, sched: SchedulerView, sj: Subjob, slot: int) -> ReadMode:
        """Count a remote read of ``sj``'s data (cached on ``sj.cached_on``) and say whether
        this read should copy it here: when every block of it has been read remotely
        ``replicate_after`` times (ponce-hersch §4.2: "accessed for the third time")."""
        reads = self.reads
        holder = sj.cached_on
        if not reads.peer_reads or holder is None or holder == sched.slot_node[slot]:
            return reads
        counts = []
        for a, b in sj.data:
            for block in range(a // REPLICATION_BLOCK, (b - 1) // REPLICATION_BLOCK + 1):
                key = (holder, block)
                self.remote_reads[key] = self.remote_reads.get(key, 0) + 1
                counts.append(self.remote_reads[key])
        if counts and min(counts) >= self.replicate_after:
            self.replications += 1
            self.replicated_jobs.add(sj.job_id)
            return reads._replace(replicate=True)
        return reads
