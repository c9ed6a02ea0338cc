"""Out-of-order scheduling (ponce-hersch §4.1, Table 3).

Each node has a queue of subjobs whose data it caches; one more queue holds subjobs whose data
no node caches. Cached work runs first, and may displace non-cached work; idle nodes take
non-cached work, then steal from the most loaded nodes. A fairness rule bounds how long a job
can wait in the no-cache queue.
"""

from __future__ import annotations

import heapq
from collections import deque

from datasched.core.intervals import IntervalSet
from datasched.core.model import Source, Subjob
from datasched.core.scheduler import JobState, Policy, Scheduler
from datasched.policies.fcfs import cut_by_cache
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
    the queue it came from (its data's node queue if it names one, else the no-cache queue);
    an idle node with nothing queued steals from the node with the most estimated work left
    (running plus queued): the tail of its last queued subjob, sized so both end together, or
    else a balanced split of its running subjob; stolen work is marked preemptible. The
    fairness rule fires when the oldest job of the no-cache queue has waited ``fairness_h``
    hours since submission: the next free node runs it before anything else.
    """

    name = "out-of-order"
    section = "ponce-hersch §4.1, Table 3"
    summary = "out-of-order: cached work first, per-node queues, stealing, fairness bound"
    cache_fill = True

    def __init__(
        self,
        *,
        fairness_h: float = 48.0,
        replication: bool = False,
        replicate_after: int = 3,
    ) -> None:
        if not fairness_h > 0:
            raise ValueError(f"fairness_h: must be positive, got {fairness_h!r}")
        if replicate_after < 1:
            raise ValueError(f"replicate_after: must be positive, got {replicate_after!r}")
        self.fairness_s = fairness_h * 3600.0
        self.peer_reads = replication
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

    def bind(self, sched: Scheduler) -> None:
        self.node_queues = {n.node_id: deque() for n in sched.cluster.nodes}
        self._s_cache = sched.cost.s_per_event(Source.CACHE)

    # -- arrival ------------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        return {
            "fairness_fired": self.fairness_fired,
            "replications": self.replications,
            "replicated_jobs": len(self.replicated_jobs),
        }

    def job_arrived(self, sched: Scheduler, js: JobState) -> None:
        uncached: list[IntervalSet] = []
        for data, holder in cut_by_cache(sched, js.job.data):
            if holder is None:
                uncached.append(data)
                continue
            sj = sched.new_subjob(js, data, cached_on=holder)
            if sched.is_idle(holder):
                sched.start(sj, holder)
                continue
            r = sched.running.get(holder)
            if r is not None and r.settled and r.subjob.cached_on != holder:
                self._displace(sched, holder, sj)
            else:
                self.node_queues[holder].append(sj)
                self._push_load(sched, holder)
        # Idle nodes take the non-cached pieces, split so every idle node gets a share.
        idle = [n for n in sched.idle_nodes if not self.node_queues[n]]
        uncached.sort(key=lambda d: (-d.length, d.start))
        subjobs = self._spread(sched, js, uncached, len(idle))
        for node, sj in zip(idle, subjobs, strict=False):
            sched.start(sj, node)
        self.nocache.extend(subjobs[len(idle) :])

    def _spread(
        self, sched: Scheduler, js: JobState, pieces: list[IntervalSet], nodes: int
    ) -> list[Subjob]:
        """Non-cached pieces cut into about ``nodes`` subjobs (more pieces stay whole)."""
        if not pieces:
            return []
        counts = [1] * len(pieces)
        for _ in range(nodes - len(pieces)):
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

    def _displace(self, sched: Scheduler, node: int, sj: Subjob) -> None:
        """Stop the non-cached subjob on ``node``, requeue its rest at the front of the queue
        it came from, and run the cached ``sj`` there."""
        victim = sched.running[node].subjob

        def then(remaining: IntervalSet) -> None:
            if remaining:
                vjs = sched.jobs[victim.job_id]
                rest = sched.new_subjob(
                    vjs, remaining, cached_on=victim.cached_on, preemptible=victim.preemptible
                )
                self._queue_of(rest).appendleft(rest)
                if rest.cached_on is not None:
                    self._push_load(sched, rest.cached_on)
            sched.start(sj, node)

        sched.preempt(node, then)

    def _queue_of(self, sj: Subjob) -> deque[Subjob]:
        if sj.cached_on is None:
            return self.nocache
        return self.node_queues[sj.cached_on]

    # -- a node is free -----------------------------------------------------------------------

    def node_freed(self, sched: Scheduler, node: int, ended: JobState | None) -> None:
        if self.nocache and self._overdue(sched, self.nocache[0]):
            sj = self.nocache.popleft()
            if sj.job_id not in self._fired_jobs:
                self._fired_jobs.add(sj.job_id)
                self.fairness_fired += 1
            sched.start(sj, node)
            return
        queue = self.node_queues[node]
        if queue:
            sched.start(queue.popleft(), node)
            return
        if self.nocache:
            self._take_nocache(sched, node)
            return
        self._steal(sched, node)

    def _overdue(self, sched: Scheduler, sj: Subjob) -> bool:
        return sched.now - sched.jobs[sj.job_id].job.submit_s > self.fairness_s

    def _take_nocache(self, sched: Scheduler, node: int) -> None:
        """Run the first no-cache subjob, split across the other idle nodes with nothing
        queued, if they would otherwise stay idle."""
        sj = self.nocache.popleft()
        helpers = [n for n in sched.idle_nodes if n != node and not self.node_queues[n]]
        if not helpers or len(self.nocache) >= len(helpers):
            sched.start(sj, node)
            return
        js = sched.jobs[sj.job_id]
        sched.discard(sj)
        parts = sched.split_even(sj.data, 1 + len(helpers))
        for part, target in zip(parts, [node, *helpers], strict=False):
            sched.start(sched.new_subjob(js, part, preemptible=sj.preemptible), target)

    def _done_at(self, sched: Scheduler, node: int) -> float:
        """When ``node`` is estimated to have done its subjob and its queue (queued work is
        cached there: cache speed). Constant while neither changes."""
        r = sched.running.get(node)
        end = r.end_s if r is not None else sched.now
        queue = self.node_queues[node]
        if not queue:  # the common case: no generator to build
            return end
        return end + sum(sj.data.length for sj in queue) * self._s_cache

    def _push_load(self, sched: Scheduler, node: int) -> None:
        """Record that ``node``'s load may have grown (a start, or work queued there)."""
        heapq.heappush(self._loads, (-self._done_at(sched, node), node))

    def started(self, sched: Scheduler, sj: Subjob, node: int) -> None:
        self._push_load(sched, node)

    def _most_loaded(self, sched: Scheduler, node: int) -> tuple[int | None, float]:
        """The running node (not ``node``) with the most work left, and that work in seconds.

        A lazy heap keyed by when each node would be done: a node's load only shrinks
        between the pushes made when it grows, so an entry that still matches its node's
        load at the top is the maximum; one that does not is re-pushed with the true value.
        O(log n) amortised instead of a scan of all nodes (ponce-hersch Table 5).
        """
        heap = self._loads
        skipped = []
        best: int | None = None
        best_load = 0.0
        while heap:
            neg_done, other = heap[0]
            if other not in sched.running:
                heapq.heappop(heap)  # idle: pushed again when it starts
                continue
            done = self._done_at(sched, other)
            if done != -neg_done:
                heapq.heapreplace(heap, (-done, other))
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

    def _steal(self, sched: Scheduler, node: int) -> None:
        """Take work from the most loaded node, so both end at about the same time."""
        best, best_load = self._most_loaded(sched, node)
        if best is None:
            return
        queue = self.node_queues[best]
        if queue:
            sj = queue.pop()
            a = sched.s_per_event_on(best, sj.data)
            b = sched.s_per_event_on(node, sj.data)
            n_give = min(sj.data.length, int(best_load / (a + b)))
            if n_give < sched.min_subjob_events:
                queue.append(sj)
                return
            js = sched.jobs[sj.job_id]
            keep, give = sched.cut(sj.data, sj.data.length - n_give)
            sched.discard(sj)
            if keep:
                queue.append(sched.new_subjob(js, keep, cached_on=sj.cached_on))
            sched.start(sched.new_subjob(js, give, cached_on=best, preemptible=True), node)
            return
        r = sched.running[best]
        if r.settled:
            sched.split_running(best, node)

    def wants_replica(self, sched: Scheduler, sj: Subjob, node: int) -> bool:
        """Count a remote read of ``sj``'s data (cached on ``sj.cached_on``) and say whether
        this read should copy it here: when every block of it has been read remotely
        ``replicate_after`` times (ponce-hersch §4.2: "accessed for the third time")."""
        holder = sj.cached_on
        if not self.peer_reads or holder is None or holder == node:
            return False
        counts = []
        for a, b in sj.data:
            for block in range(a // REPLICATION_BLOCK, (b - 1) // REPLICATION_BLOCK + 1):
                key = (holder, block)
                self.remote_reads[key] = self.remote_reads.get(key, 0) + 1
                counts.append(self.remote_reads[key])
        if counts and min(counts) >= self.replicate_after:
            self.replications += 1
            self.replicated_jobs.add(sj.job_id)
            return True
        return False
