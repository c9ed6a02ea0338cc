"""The scheduling core: a pure state machine, ``handle(event) -> list[Action]``.

It holds the master's view of the cluster (ponce-hersch §2.3: scheduling runs on a dedicated
master node): jobs, queues, running and suspended subjobs, idle nodes, and the cache directory.
A :class:`Policy` decides; the scheduler keeps the books so that the subjobs of every job
always partition what is left of it, which is what makes "every event processed exactly once"
hold whatever the policy does.

Suspending a running subjob is a two-step exchange, the same in every engine: the scheduler
sends Preempt, the engine answers SubjobStopped with the unprocessed remainder (at once in the
simulator, at a packet boundary in the runtime), and the continuation the policy gave with the
Preempt decides where that remainder goes. Splitting one is the same exchange with Shrink and
SubjobShrunk: the engine gives up part of what is left and the subjob runs on with the rest.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from datasched.core.actions import Action, JobCompleted, Preempt, Shrink, Start, WakeAt
from datasched.core.cache import CacheDirectory
from datasched.core.events import (
    CacheChanged,
    Event,
    JobArrived,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, Job, Source, Subjob

__all__ = ["JobState", "Policy", "Running", "Scheduler", "SchedulerError"]

_EMPTY = IntervalSet()

Continuation = Callable[[IntervalSet], None]
"""What to do with what the engine gave up, once it answered: a preempted subjob's remainder
(SubjobStopped), or the part a Shrink released (SubjobShrunk)."""


class SchedulerError(RuntimeError):
    """An engine or a policy broke the protocol (a bug, never bad user input)."""


@dataclass(slots=True, eq=False)
class JobState:
    """The master's record of one job in the system."""

    job: Job
    done_events: int = 0
    first_start_s: float | None = None
    released_s: float | None = None
    """Set by policies that hold jobs back (delayed scheduling): when this one was let go."""
    live: dict[int, Subjob] = field(default_factory=dict)
    """Subjobs not yet finished: running, stopping or suspended."""
    suspended: deque[Subjob] = field(default_factory=deque)
    running_nodes: set[int] = field(default_factory=set)

    @property
    def job_id(self) -> int:
        return self.job.job_id

    @property
    def started(self) -> bool:
        return self.first_start_s is not None

    @property
    def remaining_events(self) -> int:
        return self.job.n_events - self.done_events


@dataclass(slots=True, eq=False)
class Running:
    """A subjob running on a node, with the master's estimate of its pace."""

    subjob: Subjob
    node: int
    start_s: float
    s_per_event: float
    stopping: bool = False
    """A Preempt is on its way: the subjob is leaving the node."""
    shrinking: bool = False
    """A Shrink is on its way: part of the subjob is being taken away."""
    end_s: float = 0.0
    """Estimated end: ``start_s`` plus its events at ``s_per_event``."""

    def __post_init__(self) -> None:
        self.end_s = self.start_s + self.subjob.data.length * self.s_per_event

    @property
    def settled(self) -> bool:
        """No Preempt or Shrink is waiting for its answer (the subjob may be asked again)."""
        return not (self.stopping or self.shrinking)

    def estimated_done(self, now: float) -> int:
        if self.s_per_event <= 0:
            return 0
        return min(self.subjob.data.length, int((now - self.start_s) / self.s_per_event))

    def estimated_remaining(self, now: float) -> int:
        return self.subjob.data.length - self.estimated_done(now)


class Policy:
    """Base class of scheduling policies; subclasses implement a paper's table.

    Hooks are documented no-ops; a policy reads the scheduler's state and calls its commands
    (:meth:`Scheduler.start`, :meth:`Scheduler.preempt`, ...). ``cache_fill`` and
    ``peer_reads`` say how started subjobs use the node caches.
    """

    name: ClassVar[str] = ""
    section: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    cache_fill: ClassVar[bool] = False
    peer_reads: bool = False
    """Whether started subjobs may read data cached on other nodes from there."""
    fill_duplicates: bool = True
    """Whether a node caches data that another node already caches."""

    def bind(self, sched: Scheduler) -> None:
        """Called once when the scheduler is created."""

    def job_arrived(self, sched: Scheduler, js: JobState) -> None:
        """A job was submitted. Default: queue it."""
        sched.job_queue.append(js.job_id)

    def node_freed(self, sched: Scheduler, node: int, ended: JobState | None) -> None:
        """``node`` became free and nothing was waiting for it.

        ``ended`` is the job whose subjob just left the node (None when unknown); it has
        already been removed from ``sched.jobs`` when that was its last subjob.
        """

    def tick(self, sched: Scheduler) -> None:
        """A WakeAt this policy asked for came due."""

    def started(self, sched: Scheduler, sj: Subjob, node: int) -> None:
        """``sj`` was just started on ``node`` (by the policy or by a split it asked for)."""

    def counters(self) -> dict[str, int]:
        """How often the policy's special rules fired (for reports). Default: none."""
        return {}

    def held_jobs(self) -> int:
        """Jobs the policy holds back on purpose (delayed scheduling's current period):
        not part of a queue that grows from overload. Default: none."""
        return 0

    def max_delay_s(self) -> float:
        """The longest time the policy holds a job back on purpose. Default: none."""
        return 0.0

    def wants_replica(self, sched: Scheduler, sj: Subjob, node: int) -> bool:
        """Whether ``sj``, starting on ``node``, should copy what it reads from peers into
        the node's cache (ponce-hersch §4.2). Default: never."""
        return False


class Scheduler:
    """The master's state machine; one instance per cluster and policy."""

    def __init__(
        self, cluster: ClusterSpec, policy: Policy, *, min_subjob_events: int = 10
    ) -> None:
        if min_subjob_events < 1:
            raise ValueError(f"min_subjob_events: must be positive, got {min_subjob_events!r}")
        self.cluster = cluster
        self.cost = cluster.cost
        self.policy = policy
        self.min_subjob_events = min_subjob_events
        self.now = 0.0
        self.jobs: dict[int, JobState] = {}
        self.job_queue: deque[int] = deque()
        """Jobs not yet started, first come first served."""
        self.running: dict[int, Running] = {}
        """Node -> the subjob running there."""
        self.directory = CacheDirectory(cluster.n_nodes)
        self.completed = 0
        self._idle: list[int] = list(range(cluster.n_nodes))
        self._reserved: set[int] = set()
        self._lost: set[int] = set()
        self._continuations: dict[int, Continuation] = {}
        self._split_targets: dict[int, int] = {}
        self._subjob_ids: Iterator[int] = itertools.count()
        self._out: list[Action] = []
        self._freed: list[tuple[int, JobState | None]] = []
        self._by_end: list[tuple[float, int, int]] | None = None
        """Lazy max-heap of running subjobs by estimated end: (-end, node, subjob id); built
        on the first question that needs it (policies that never ask do not keep it)."""
        self._s_cache = self.cost.s_per_event(Source.CACHE)
        self._s_peer = self.cost.s_per_event(Source.PEER)
        self._s_tertiary = self.cost.s_per_event(Source.TERTIARY)
        self.fastest_s_per_event = min(self.cost.s_per_event(src) for src in Source)
        """The least time per event any read can take (a bound for policies' estimates)."""
        self.slowest_s_per_event = max(self.cost.s_per_event(src) for src in Source)
        """The most time per event any read can take."""
        self.boundaries: list[int] = []
        """Sorted event numbers where cutting is cheap (where files begin, for an engine
        that caches whole files): :meth:`cut` moves cuts there when one is near."""
        policy.bind(self)

    # -- the one entry point ------------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Take one event, return the actions it calls for (in the order to carry them out)."""
        if event.time < self.now:
            raise SchedulerError(f"event at {event.time} is earlier than {self.now}")
        self.now = event.time
        out: list[Action] = []
        self._out = out
        # The most frequent kinds first (a job sees tens of finishes and shrinks).
        if isinstance(event, SubjobFinished):
            self._on_finished(event)
        elif isinstance(event, SubjobShrunk):
            self._on_shrunk(event)
        elif isinstance(event, JobArrived):
            self._on_arrived(event.job)
        elif isinstance(event, SubjobStopped):
            self._on_stopped(event)
        elif isinstance(event, CacheChanged):
            self.directory.remove(event.node, event.evicted)
            self.directory.add(event.node, event.added)
        elif isinstance(event, NodeLost):
            self._on_node_lost(event)
        elif isinstance(event, Tick):
            self.policy.tick(self)
        self._offer_freed()
        return out

    # -- views for policies -------------------------------------------------------------------

    @property
    def idle_nodes(self) -> list[int]:
        """Free nodes, lowest id first (read-only: use the commands to change it)."""
        return self._idle

    def is_idle(self, node: int) -> bool:
        i = bisect_left(self._idle, node)
        return i < len(self._idle) and self._idle[i] == node

    def s_per_event_on(self, node: int, data: IntervalSet) -> float:
        """The master's estimate of the mean time per event of ``data`` run on ``node``."""
        n = data.length
        if n == 0:
            return self._s_cache
        if not self.policy.cache_fill and not self.policy.peer_reads:
            return self._s_tertiary
        local = self.directory.cached_length(node, data)
        peer = 0
        if self.policy.peer_reads:
            for start, stop in data:
                for a, b, holders in self.directory.holders(start, stop):
                    if holders and node not in holders:
                        peer += b - a
        total = local * self._s_cache + peer * self._s_peer + (n - local - peer) * self._s_tertiary
        return total / n

    def longest_running(self) -> int | None:
        """The node whose subjob (not being stopped) is estimated to end last, the lowest
        node on ties; None if every one is due. O(log n) amortised: a heap by estimated end,
        whose stale entries are dropped when they reach the top (ponce-hersch Table 5 has
        job splitting scan all nodes here)."""
        heap = self._end_heap()
        while heap:
            neg_end, node, subjob_id = heap[0]
            if not self._current(neg_end, node, subjob_id):
                heapq.heappop(heap)
                continue
            return node if -neg_end > self.now else None
        return None

    def _current(self, neg_end: float, node: int, subjob_id: int) -> bool:
        """Whether an entry of the by-end heap still describes a subjob that may be asked to
        split: still running, settled, and with that estimated end (a shrunk one is pushed
        again with its new end)."""
        r = self.running.get(node)
        return (
            r is not None and r.subjob.subjob_id == subjob_id and r.settled and r.end_s == -neg_end
        )

    def _end_heap(self) -> list[tuple[float, int, int]]:
        """The by-end heap, built from what runs now when first asked for."""
        if self._by_end is None:
            self._by_end = [(-r.end_s, r.node, r.subjob.subjob_id) for r in self.running.values()]
            heapq.heapify(self._by_end)
        return self._by_end

    def _push_end(self, r: Running) -> None:
        """Enter ``r`` in the by-end heap. Entries of subjobs that ended before the longest
        never reach the top, so the heap is rebuilt from its current entries whenever it holds
        more than twice what is running (plus a constant). A rebuild keeps at most one entry per
        running subjob (a shrink that released nothing pushes a copy), so it is amortised O(1)
        per push and the heap stays O(nodes) instead of growing with every subjob started."""
        heap = self._by_end
        if heap is None:
            return  # not asked for yet: built from ``running`` when it is
        heapq.heappush(heap, (-r.end_s, r.node, r.subjob.subjob_id))
        if len(heap) > 2 * len(self.running) + 1024:
            heap[:] = dict.fromkeys(e for e in heap if self._current(*e))
            heapq.heapify(heap)

    def scan_longest(self, visit: Callable[[int, float], bool]) -> None:
        """Call ``visit(node, estimated seconds left)`` for running subjobs (not being
        stopped) from the one estimated to end last, until it returns False. Costs
        O(k log n) for k visits (the heap of :meth:`longest_running`), so a policy that can
        bound what it looks for stops early instead of scanning every node."""
        heap = self._end_heap()
        taken: list[tuple[float, int, int]] = []
        try:
            while heap:
                entry = heapq.heappop(heap)
                neg_end, node, subjob_id = entry
                if not self._current(neg_end, node, subjob_id):
                    continue
                taken.append(entry)
                if not visit(node, -neg_end - self.now):
                    break
        finally:
            for entry in taken:
                heapq.heappush(heap, entry)

    def estimated_remaining_s(self, node: int) -> float:
        """Estimated seconds until the subjob on ``node`` ends (0 if idle)."""
        r = self.running.get(node)
        if r is None:
            return 0.0
        return r.estimated_remaining(self.now) * r.s_per_event

    # -- commands for policies ----------------------------------------------------------------

    def new_subjob(
        self,
        js: JobState,
        data: IntervalSet,
        *,
        cached_on: int | None = None,
        preemptible: bool = False,
    ) -> Subjob:
        """Create a subjob of ``js`` over ``data`` (which the caller has taken from the job)."""
        sj = Subjob(
            subjob_id=next(self._subjob_ids),
            job_id=js.job_id,
            data=data,
            cached_on=cached_on,
            preemptible=preemptible,
        )
        js.live[sj.subjob_id] = sj
        return sj

    def start(self, sj: Subjob, node: int) -> None:
        """Run ``sj`` on the free (or reserved) ``node``."""
        if node in self._reserved:
            self._reserved.discard(node)
        else:
            i = bisect_left(self._idle, node)
            if i == len(self._idle) or self._idle[i] != node:
                raise SchedulerError(f"node {node} is not free")
            del self._idle[i]
        js = self.jobs[sj.job_id]
        if js.first_start_s is None:
            js.first_start_s = self.now
        js.running_nodes.add(node)
        r = Running(sj, node, self.now, self.s_per_event_on(node, sj.data))
        self.running[node] = r
        self._push_end(r)
        self.policy.started(self, sj, node)
        self._out.append(
            Start(
                subjob=sj,
                node=node,
                cache_fill=self.policy.cache_fill,
                peer_reads=self.policy.peer_reads,
                replicate=self.policy.wants_replica(self, sj, node),
                fill_duplicates=self.policy.fill_duplicates,
            )
        )

    def suspend(self, sj: Subjob, *, front: bool = True) -> None:
        """Park a subjob that is not running with its job, to be resumed later."""
        js = self.jobs[sj.job_id]
        if front:
            js.suspended.appendleft(sj)
        else:
            js.suspended.append(sj)

    def discard(self, sj: Subjob) -> None:
        """Forget a waiting (never started, or suspended) subjob whose data the policy is
        about to hand out again as new subjobs; the books stay exact only if it does."""
        js = self.jobs[sj.job_id]
        if any(r.subjob is sj for r in self.running.values()):
            raise SchedulerError(f"subjob {sj.subjob_id} is running: preempt it instead")
        del js.live[sj.subjob_id]
        if sj in js.suspended:
            js.suspended.remove(sj)

    def take_suspended(self, js: JobState, sj: Subjob) -> None:
        """Remove ``sj`` from its job's suspended subjobs (before starting it)."""
        js.suspended.remove(sj)

    def preempt(self, node: int, then: Continuation | None = None) -> Running:
        """Ask the engine to stop the subjob on ``node``.

        ``then(remaining)`` runs when the engine has stopped it; ``node`` is free by then (and
        offered to the policy afterwards if ``then`` leaves it free). Without ``then`` the
        remainder is suspended at the front of its job.
        """
        r = self.running[node]
        if not r.settled:
            raise SchedulerError(f"node {node} is already being preempted or shrunk")
        r.stopping = True
        if then is not None:
            self._continuations[r.subjob.subjob_id] = then
        self._out.append(Preempt(subjob_id=r.subjob.subjob_id, node=node))
        return r

    def reserve(self, node: int) -> None:
        """Hold a free node back for a continuation (it is not offered to anyone else)."""
        i = bisect_left(self._idle, node)
        if i == len(self._idle) or self._idle[i] != node:
            raise SchedulerError(f"node {node} is not free")
        del self._idle[i]
        self._reserved.add(node)

    def release(self, node: int, *, offer: bool = True) -> None:
        """Give a reserved node back; it is offered to the policy like any freed node unless
        ``offer`` is False (then it waits, idle, for the next event)."""
        self._reserved.discard(node)
        if node in self._lost:
            return
        insort(self._idle, node)
        if offer:
            self._freed.append((node, None))

    def cut(self, data: IntervalSet, n: int) -> tuple[IntervalSet, IntervalSet]:
        """``data.head(n)``, with the cut moved to the nearest of :attr:`boundaries` that is
        at most half the smaller part away and leaves both parts at least the minimal
        subjob. Without boundaries, exactly ``data.head(n)``."""
        length = data.length
        if not self.boundaries or n <= 0 or n >= length:
            return data.head(n)
        slack = min(n, length - n) // 2
        lo, hi = data.event_at(max(n - slack, 0)), data.event_at(min(n + slack, length - 1))
        b = self.boundaries
        best, best_gap = n, slack + 1
        for j in range(bisect_left(b, lo), len(b)):
            if b[j] > hi:
                break
            k = data.split_at(b[j])[0].length
            gap = abs(k - n)
            fits = self.min_subjob_events <= k <= length - self.min_subjob_events
            if fits and gap < best_gap:
                best, best_gap = k, gap
        return data.head(best)

    def split_even(
        self, data: IntervalSet, parts: int, min_events: int | None = None
    ) -> list[IntervalSet]:
        """``data.split_even`` (pieces of at least ``min_events``, by default the minimal
        subjob), each cut moved by :meth:`cut` when there are boundaries."""
        minimum = self.min_subjob_events if min_events is None else min_events
        pieces = data.split_even(parts, minimum)
        if not self.boundaries or len(pieces) < 2:
            return pieces
        out = []
        rest = data
        for piece in pieces[:-1]:
            head, rest = self.cut(rest, piece.length)
            if head:
                out.append(head)
        if rest:
            out.append(rest)
        return out

    def wake_at(self, time: float) -> None:
        self._out.append(WakeAt(time=time))

    def balanced_share(self, node: int, target: int, rest: IntervalSet) -> float:
        """Fraction of ``rest`` (what remains on ``node``) to move to ``target`` so both end
        together."""
        keep_s = self.running[node].s_per_event
        give_s = self.s_per_event_on(target, rest)
        return keep_s / (keep_s + give_s)

    def split_running(
        self,
        node: int,
        target: int,
        pick: Callable[[IntervalSet], IntervalSet] | None = None,
    ) -> bool:
        """Split the subjob running on ``node`` and move a part of it to the free ``target``.

        By default the tail of what remains moves, sized so both parts end at about the same
        time (equal halves when both read at the same speed: ponce-hersch Table 1). ``pick``
        chooses the moved part instead (cache-oriented splitting moves what ``target``
        caches), unless it leaves either side less than the minimal subjob. Returns False,
        doing nothing, when the estimated remainder is too small.

        The running subjob is shrunk, not stopped: it goes on with what it keeps, and what
        the engine releases starts on ``target`` as a new, preemptible subjob.
        """
        r = self.running[node]
        if not r.settled:
            return False
        minimum = self.min_subjob_events
        done = r.estimated_done(self.now)
        left = r.subjob.data.length - done
        if left < 2 * minimum:
            return False  # (before cutting: a third of the calls end here)
        _, rest = r.subjob.data.head(done)
        give = pick(rest) if pick is not None else _EMPTY
        if give.length < minimum or left - give.length < minimum:
            # A split leaves work on both nodes; moving everything could ping-pong.
            share = self.balanced_share(node, target, rest)
            give = self.cut(rest, left - round(left * share))[1]
        if give.length < minimum or left - give.length < minimum:
            return False
        self.reserve(target)
        origin = r.subjob
        self._split_targets[origin.subjob_id] = target

        def then(released: IntervalSet) -> None:
            del self._split_targets[origin.subjob_id]
            if not released:
                # The estimate was off (it had been processed): no split. Not offering the
                # target again now keeps the policy from asking for the same split in a loop.
                self.release(target, offer=False)
                return
            js = self.jobs[origin.job_id]
            # The moved part keeps naming the node that caches it (its queue of origin, for
            # out-of-order scheduling), unless the target caches it itself.
            on_target = released.issubset(self.directory.content(target))
            cached_on = target if on_target else origin.cached_on
            self.start(self.new_subjob(js, released, cached_on=cached_on, preemptible=True), target)

        r.shrinking = True
        self._continuations[origin.subjob_id] = then
        self._out.append(Shrink(subjob_id=origin.subjob_id, node=node, release=give))
        return True

    # -- event handlers -----------------------------------------------------------------------

    def _on_arrived(self, job: Job) -> None:
        if job.job_id in self.jobs:
            raise SchedulerError(f"job {job.job_id} arrived twice")
        js = JobState(job)
        self.jobs[job.job_id] = js
        if job.n_events == 0:
            self._complete(js)
            return
        self.policy.job_arrived(self, js)

    def _on_finished(self, ev: SubjobFinished) -> None:
        self._subjob_left(ev.node, ev.subjob_id, None, ev.cache_added, ev.cache_evicted)

    def _on_shrunk(self, ev: SubjobShrunk) -> None:
        r = self.running.get(ev.node)
        if r is None or r.subjob.subjob_id != ev.subjob_id:
            # It left the node first (a lost worker's packets): its continuation took what
            # was left then, and an engine cannot release anything from it any more.
            if ev.released:
                raise SchedulerError(f"subjob {ev.subjob_id} released events after it left")
            return
        if not r.shrinking:
            raise SchedulerError(f"subjob {ev.subjob_id} on node {ev.node} was not being shrunk")
        sj = r.subjob
        if not ev.released.issubset(sj.data):
            raise SchedulerError(f"subjob {ev.subjob_id}: released events are not part of its data")
        r.shrinking = False
        if ev.released:
            r.subjob = sj.shrunk(ev.released)
            self.jobs[sj.job_id].live[sj.subjob_id] = r.subjob
            r.end_s = r.start_s + r.subjob.data.length * r.s_per_event
        self._push_end(r)
        self._continuations.pop(sj.subjob_id)(ev.released)

    def _on_stopped(self, ev: SubjobStopped) -> None:
        self._subjob_left(ev.node, ev.subjob_id, ev.remaining, ev.cache_added, ev.cache_evicted)

    def _subjob_left(
        self,
        node: int,
        subjob_id: int,
        remaining: IntervalSet | None,
        added: IntervalSet,
        evicted: IntervalSet,
    ) -> None:
        """Book a subjob that left ``node``: finished (``remaining`` None) or stopped."""
        r = self.running.get(node)
        if r is None or r.subjob.subjob_id != subjob_id:
            raise SchedulerError(f"subjob {subjob_id} is not running on node {node}")
        sj = r.subjob
        if remaining is None:
            remaining = _EMPTY
        elif not remaining.issubset(sj.data):
            raise SchedulerError(f"subjob {subjob_id}: remainder is not part of its data")
        del self.running[node]
        js = self.jobs[sj.job_id]
        del js.live[subjob_id]
        js.running_nodes.discard(node)
        js.done_events += sj.data.length - remaining.length
        self._cache_report(node, added, evicted)
        insort(self._idle, node)
        # A Preempt that crossed a finish still gets its answer (an empty remainder), so that
        # whatever it reserved is given back.
        then = self._continuations.pop(subjob_id, None)
        if then is not None:
            then(remaining)
        elif remaining:
            self.suspend(self.new_subjob(js, remaining, cached_on=sj.cached_on))
        self._after_subjob(js)
        if self.is_idle(node):
            self._freed.append((node, js))

    def _on_node_lost(self, ev: NodeLost) -> None:
        """A node died: what its subjob had not processed goes back to its job, unprocessed."""
        node = ev.node
        r = self.running.pop(node, None)
        if r is not None:
            sj = r.subjob
            remaining = ev.remaining if ev.remaining is not None else sj.data
            if not remaining.issubset(sj.data):
                raise SchedulerError(f"subjob {sj.subjob_id}: remainder is not part of its data")
            js = self.jobs[sj.job_id]
            del js.live[sj.subjob_id]
            js.running_nodes.discard(node)
            js.done_events += sj.data.length - remaining.length
            self._continuations.pop(sj.subjob_id, None)
            target = self._split_targets.pop(sj.subjob_id, None)
            if target is not None:
                self.release(target)
            if remaining:
                self.suspend(self.new_subjob(js, remaining, cached_on=None))
            self._after_subjob(js)
            if js.job_id in self.jobs and not js.running_nodes:
                # Nobody is working on this job now: give its work to a free node.
                self._freed.extend((n, js) for n in self._idle[:1])
        self._lost.add(node)
        i = bisect_left(self._idle, node)
        if i < len(self._idle) and self._idle[i] == node:
            del self._idle[i]
        self._reserved.discard(node)
        self.directory.remove(node, self.directory.content(node))

    def _cache_report(self, node: int, added: IntervalSet, evicted: IntervalSet) -> None:
        if evicted:
            self.directory.remove(node, evicted)
        if added:
            self.directory.add(node, added)

    def _after_subjob(self, js: JobState) -> None:
        if not js.live and js.done_events == js.job.n_events:
            self._complete(js)
        elif js.done_events > js.job.n_events:
            raise SchedulerError(f"job {js.job_id}: more events processed than it has")

    def _complete(self, js: JobState) -> None:
        del self.jobs[js.job_id]
        self.completed += 1
        first = js.first_start_s if js.first_start_s is not None else self.now
        released = js.released_s if js.released_s is not None else -1.0
        self._out.append(
            JobCompleted(job_id=js.job_id, time=self.now, first_start_s=first, released_s=released)
        )

    def _offer_freed(self) -> None:
        # Nodes freed while handling this event are offered to the policy one by one, after
        # the books are straight; offering may free more (a preemption answered at once).
        while self._freed:
            node, ended = self._freed.pop(0)
            if self.is_idle(node):
                self.policy.node_freed(self, node, ended)
