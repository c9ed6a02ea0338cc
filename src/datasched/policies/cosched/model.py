"""Co-scheduling data movement with computation (romosan): the model, and the books every policy
of the paper keeps (:class:`CoScheduling`). The policies: ``fifo-roundrobin`` and ``sjf-data``
in :mod:`datasched.policies.cosched.greedy`, ``mincostflow`` in
:mod:`datasched.policies.cosched.flow`.

The model: a job needs one or more whole files; a server (a node) has several slots and a disk
cache. A job starts on a server only when one of its slots is free and every file of the job is
in that server's cache, pinned there for the job's run and released after. Choosing a server
for a job is *placing* it: it then holds one of the server's free slots while its missing files
come, each from another server's cache (a local copy, cost ``l``: :meth:`SchedulerView.
replicate`) or from the archive (a remote copy, cost ``r``: :meth:`SchedulerView.fetch`).
Transfers in flight are known (the paper's own "future work"): a job placed where one of its
files is on its way waits for that transfer instead of starting another, and a file on its way
to another server is copied from there once it has landed, not fetched from the archive again;
for the costs, a file on its way to a server is as good as there. Caches keep what
arrives and drop the least recently used unpinned files (the engines' caches).

Where the paper is silent:

* a job runs whole on one slot, as one subjob;
* a file larger than the server's cache (all the job's files together, counted in order) is
  not staged: the job reads it from the archive while it runs;
* a transfer that ends without the file in the cache (its source failed, or the cache was full
  of pinned files) is asked once more, from the archive; after that the job runs without it;
* work that comes back unprocessed (a lost server's, a stopped subjob's) is placed again
  before any job that arrived after it; a lost server's placed jobs go back to the queue;
* a local copy comes from the holder with the fewest copies going out, then the lowest id;
  the same rule picks the server to copy from once a file on its way has landed.

Length: one set of books. Every hook changes several of them at once (the queue, the placed
jobs, the servers' free slots, the transfers, the pins), and each policy reads them all; the
index of servers by free slots is a module of its own
(:mod:`datasched.policies.cosched.freeslots`), this file only says when a count changes.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import ClassVar

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.policy import JobView, Param, Policy, ReadMode, Returned, SchedulerView
from datasched.policies.cosched.freeslots import FreeSlots

__all__ = ["LOCAL_COST", "REMOTE_COST", "CoScheduling", "Item"]

_NOWHERE: frozenset[int] = frozenset()

LOCAL_COST = Param(
    "local_cost",
    float,
    1.0,
    "cost of a local copy (from another server's cache) per byte",
    low=0.0,
)
REMOTE_COST = Param(
    "remote_cost",
    float,
    10.0,
    "cost of a remote copy (from the archive) per byte",
    low=0.0,
)


@dataclass(eq=False, slots=True)
class Item:
    """A job (or a returned rest of one) waiting to run: queued, or placed on a server."""

    seq: int
    """Arrival order; a returned rest keeps its job's."""
    job_id: int
    data: IntervalSet
    files: tuple[int, ...]
    subjob: Subjob | None = None
    """A returned rest; None for a job not started yet (its subjob is made at the start)."""
    node: int = -1
    """The server it is placed on (-1: queued)."""
    waiting: set[int] = field(default_factory=set)
    tokens: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    """The files it holds room for in its server's cache (pinned, or on their way)."""
    retried: set[int] = field(default_factory=set)
    remote: bool = False
    """Some of its files are read from the archive while it runs (not staged)."""


@dataclass(eq=False, slots=True)
class _Move:
    """A file on its way into a server's cache, and the placed jobs waiting for it."""

    source: int | None
    """The server it is copied from (None: the archive)."""
    waiters: list[Item]
    after: int = -1
    """The server it is on its way to first: the local copy starts once it has landed
    there (-1: the transfer is under way)."""


class CoScheduling(Policy):
    """The books of romosan's model (see the module docstring); subclasses choose which
    queued job goes to which server in :meth:`_dispatch`."""

    reads = ReadMode(cache_fill=True)
    keeps_free_slots: ClassVar[bool] = False
    """Whether the policy keeps :class:`FreeSlots`, every server's free slots as they change
    (:meth:`free_slots`); the policies that only look for one server at a time do not."""

    def __init__(self) -> None:
        self._items: dict[int, Item] = {}
        """Queued items by seq."""
        self._order: list[int] = []
        """Heap of queued seqs (stale entries skipped)."""
        self._by_file: dict[int, list[int]] = {}
        """File -> heap of the queued seqs needing it (stale entries skipped)."""
        self._popularity: dict[int, int] = {}
        """File -> queued items needing it (the paper's N(f))."""
        self._job_seq: dict[int, int] = {}
        self._next_seq = 0
        self._placed: dict[int, Item] = {}
        """Items placed on a server, waiting for files, by seq."""
        self._staged: dict[int, int] = {}
        """Server -> items placed on it and not started (each holds a free slot)."""
        self._inflight: dict[int, dict[int, _Move]] = {}
        """Server -> file -> the transfer bringing it."""
        self._sending: dict[int, int] = {}
        """Server -> local copies going out of it."""
        self._moving: dict[int, int] = {}
        """File -> servers it is on its way to."""
        self._coming: dict[int, set[int]] = {}
        """File -> the servers it is on its way to (those of ``_inflight`` bringing it)."""
        self._open: list[int] = []
        """Servers that may have a free slot, ascending: every server with one is here, and
        one found without is dropped as it is looked at (see :meth:`_next_open`)."""
        self._open_set: set[int] = set()
        self._roomy: list[tuple[int, int]] = []
        """Heap of (-free slots, server): every server with free slots has an entry with at
        least as many, and an entry whose count is out of date is corrected as it comes to the
        top (see :meth:`widest_open`)."""
        self._rescan = True
        """The next look at the free servers starts from every server (see :meth:`_free`)."""
        self._slots = FreeSlots()
        """Every server's free slots (only with ``keeps_free_slots``; see :meth:`free_slots`)."""
        self._slots_stale = True
        """:attr:`_slots` is to be counted again from every server before it is read."""
        self._chained: dict[tuple[int, int], list[int]] = {}
        """(server, file) -> servers whose copy of the file waits for it to land there."""
        self._running: dict[int, tuple[int, Item]] = {}
        """Slot -> (subjob id, item) of the subjobs this policy started."""
        self._fill: dict[int, bool] = {}
        self._held: dict[int, dict[int, int]] = {}
        """Server -> file -> placed or running items holding room for it in the cache."""
        self.local_copies = 0
        self.remote_copies = 0
        self.unstaged_files = 0

    # -- metrics (PolicyMetrics) --------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        return {
            "local_copies": self.local_copies,
            "remote_copies": self.remote_copies,
            "unstaged_files": self.unstaged_files,
        }

    # -- hooks --------------------------------------------------------------------------------

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        seq = self._next_seq
        self._next_seq += 1
        self._job_seq[js.job_id] = seq
        data = js.job.data
        self._enqueue(Item(seq, js.job_id, data, tuple(sched.space.files_in(data))))
        self._dispatch(sched)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        self._reap(sched, slot)
        self._opened(sched, sched.slot_node[slot])
        self._dispatch(sched)

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        self._reap(sched)
        self._rescan = True  # its slot is free, but which one is not said
        self._slots_stale = True
        seq = self._job_seq.get(sj.job_id, -1)
        files = tuple(sched.space.files_in(sj.data))
        self._enqueue(Item(seq, sj.job_id, sj.data, files, subjob=sj))
        self._dispatch(sched)

    def node_joined(self, sched: SchedulerView, node: int) -> None:
        self._opened(sched, node)

    def node_lost(self, sched: SchedulerView, node: int) -> None:
        self._reap(sched)
        self._recount(sched, node)
        for f, move in self._inflight.pop(node, {}).items():
            self._moved(node, f, move)
        self._staged.pop(node, None)
        self._held.pop(node, None)
        for item in [i for i in self._placed.values() if i.node == node]:
            del self._placed[item.seq]
            item.node, item.tokens, item.waiting, item.retried = -1, [], set(), set()
            item.held, item.remote = [], False
            self._enqueue(item)  # the scheduler dropped its pins with the node
        for key in [k for k in self._chained if k[0] == node]:
            self._unchain(sched, *key)
        self._dispatch(sched)

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        job_id = js.job_id
        for item in list(self._items.values()):
            if item.job_id == job_id:
                self._take(item)
        for item in [i for i in self._placed.values() if i.job_id == job_id]:
            del self._placed[item.seq]
            self._staged[item.node] -= 1
            self._release(sched, item)
            self._opened(sched, item.node)
        self._job_seq.pop(job_id, None)
        self._reap(sched)
        self._dispatch(sched)

    def data_arrived(self, sched: SchedulerView, node: int, data: IntervalSet) -> None:
        moves = self._inflight.get(node)
        if not moves:
            return
        files = sched.space.files
        pending = sched.fetching(node)
        done = [
            f for f, m in moves.items() if m.after < 0 and not pending.overlaps(files[f].events)
        ]
        ready: list[Item] = []
        for f in done:
            move = moves.pop(f)
            self._moved(node, f, move)
            cached = self._cached(sched, node, f)
            for item in move.waiters:
                if self._placed.get(item.seq) is not item or item.node != node:
                    continue  # cancelled or sent back to the queue meanwhile
                if cached:
                    item.tokens.append(sched.pin(node, files[f].events))
                    item.waiting.discard(f)
                elif f not in item.retried:
                    item.retried.add(f)
                    self._bring(sched, item, node, f, from_archive=True)
                else:
                    item.waiting.discard(f)
                    self._unhold(node, item, f)
                    item.remote = True
                    self.unstaged_files += 1
                if not item.waiting:
                    ready.append(item)
            self._unchain(sched, node, f)
        for item in ready:
            if self._placed.get(item.seq) is item and not item.waiting:
                self._start(sched, item)

    def read_mode(self, sched: SchedulerView, sj: Subjob, slot: int) -> ReadMode:
        # Fill the cache as it reads unless some file could not be staged (a file larger
        # than the cache would be fetched whole for nothing).
        return ReadMode(cache_fill=self._fill.pop(sj.subjob_id, True))

    # -- the choice (subclasses) --------------------------------------------------------------

    def _dispatch(self, sched: SchedulerView) -> None:
        """Place queued items on servers with free capacity."""
        raise NotImplementedError

    # -- the queue ------------------------------------------------------------------------------

    def _enqueue(self, item: Item) -> None:
        self._items[item.seq] = item
        heapq.heappush(self._order, item.seq)
        for f in item.files:
            heapq.heappush(self._by_file.setdefault(f, []), item.seq)
            self._popularity[f] = self._popularity.get(f, 0) + 1

    def _take(self, item: Item) -> None:
        """Out of the queue (the heaps drop its seq lazily)."""
        del self._items[item.seq]
        for f in item.files:
            n = self._popularity[f] - 1
            if n:
                self._popularity[f] = n
            else:
                del self._popularity[f]

    def _head(self) -> Item | None:
        """The earliest queued item."""
        order = self._order
        while order:
            item = self._items.get(order[0])
            if item is not None:
                return item
            heapq.heappop(order)
        return None

    def _first_needing(self, f: int) -> Item | None:
        """The earliest queued item needing file ``f``."""
        heap = self._by_file.get(f)
        while heap:
            item = self._items.get(heap[0])
            if item is not None and f in item.files:
                return item
            heapq.heappop(heap)
        if heap is not None:
            del self._by_file[f]
        return None

    # -- servers --------------------------------------------------------------------------------

    def capacities(self, sched: SchedulerView) -> dict[int, int]:
        """Server -> free slots not held by placed items (servers with some only)."""
        out: dict[int, int] = {}
        staged = self._staged
        running = sched.node_running
        for node in sched.nodes:
            free = len(sched.slots_of(node)) - running[node] - staged.get(node, 0)
            if free > 0:
                out[node] = free
        return out

    def _free(self, sched: SchedulerView, node: int) -> int:
        """``node``'s free slots not held by placed items (0 for a lost one): what
        :meth:`capacities` says of it.

        The policies that decide one job at a time read the free servers from an index
        instead of a pass over every server (docs/scale.md): servers gain free slots only
        where a slot is offered (:meth:`work_requested`), a node joins, a placed job is
        cancelled, or work comes back (:meth:`work_returned`, which does not say whose slot
        it left: the next look starts again from every server). Servers lose them as jobs
        are placed and started; the index drops or corrects a server as it looks at it."""
        if sched.is_lost(node):
            return 0
        return len(sched.slots_of(node)) - sched.node_running[node] - self._staged.get(node, 0)

    def _opened(self, sched: SchedulerView, node: int) -> None:
        """``node`` may have gained free slots: into the index."""
        self._recount(sched, node)
        if node not in self._open_set:
            self._open_set.add(node)
            insort(self._open, node)
        free = self._free(sched, node)
        if free > 0:
            heapq.heappush(self._roomy, (-free, node))

    def _recount(self, sched: SchedulerView, node: int) -> None:
        """``node``'s free slots may have changed: into :attr:`_slots`."""
        if self.keeps_free_slots and not self._slots_stale:
            self._slots.set(node, self._free(sched, node))

    def free_slots(self, sched: SchedulerView) -> FreeSlots:
        """The servers with free slots not held by placed items, by count: what
        :meth:`capacities` says, kept up to date instead of a pass over every server (for
        policies with ``keeps_free_slots``). Counts change where :meth:`_free` says the index
        of free servers learns of it, and as items are placed (a start takes the slot its item
        held: the count stays); work coming back does not say whose slot it left, so the next
        read counts every server again."""
        if self._slots_stale:
            self._slots_stale = False
            self._slots = FreeSlots((n, self._free(sched, n)) for n in sched.nodes)
        return self._slots

    def _refresh(self, sched: SchedulerView) -> None:
        """Start the index again from every server when told to, or when corrections have
        piled up in the heap."""
        nodes = sched.nodes
        if not self._rescan and len(self._roomy) <= 2 * len(nodes) + 64:
            return
        self._rescan = False
        self._open = list(nodes)
        self._open_set = set(nodes)
        roomy = [(-free, n) for n in nodes if (free := self._free(sched, n)) > 0]
        heapq.heapify(roomy)
        self._roomy = roomy

    def _next_open(self, sched: SchedulerView, start: int) -> int | None:
        """The lowest server at or after ``start`` with a free slot, else the lowest with one,
        else None: ``min`` of :meth:`capacities`' servers from ``start`` on, round the end."""
        self._refresh(sched)
        open_, free = self._open, self._free
        i = bisect_left(open_, start)
        for _ in range(2):
            while i < len(open_):
                node = open_[i]
                if free(sched, node) > 0:
                    return node
                del open_[i]
                self._open_set.discard(node)
            i = 0
        return None

    def widest_open(self, sched: SchedulerView) -> tuple[int, int] | None:
        """The server with the most free slots, the lowest of those, and its free slots;
        None if no server has one."""
        self._refresh(sched)
        heap = self._roomy
        while heap:
            neg, node = heap[0]
            free = self._free(sched, node)
            if free == -neg:
                return node, free
            if free > 0:
                heapq.heapreplace(heap, (-free, node))
            else:
                heapq.heappop(heap)
        return None

    def _cached(self, sched: SchedulerView, node: int, f: int) -> bool:
        file = sched.space.files[f]
        return sched.directory.cached_length(node, file.events) >= file.n_events

    def holders(self, sched: SchedulerView, f: int) -> frozenset[int]:
        """The servers caching all of file ``f`` (whatever is on its way)."""
        file = sched.space.files[f]
        out: frozenset[int] | None = None
        at = file.start
        for a, b, nodes in sched.directory.holders(file.start, file.stop):
            if a != at:
                return frozenset()
            out = nodes if out is None else out & nodes
            at = b
        if out is None or at < file.stop:
            return frozenset()
        return out

    def holders_of(self, sched: SchedulerView, wanted: list[int]) -> list[frozenset[int]]:
        """:meth:`holders` of each of ``wanted`` (file indices, ascending), in one walk over
        the cache directory (a batch asks for every queued file at once)."""
        if len(wanted) < 8:
            return [self.holders(sched, f) for f in wanted]
        files = sched.space.files
        segments = sched.directory.holders(files[wanted[0]].start, files[wanted[-1]].stop)
        out: list[frozenset[int]] = []
        k = 0
        none: frozenset[int] = frozenset()
        for f in wanted:
            start, stop = files[f].start, files[f].stop
            while k < len(segments) and segments[k][1] <= start:
                k += 1
            held: frozenset[int] | None = None
            at = start
            j = k
            while j < len(segments) and segments[j][0] < stop:
                a, b, nodes = segments[j]
                if a > at:
                    held = none
                    break
                held = nodes if held is None else held & nodes
                at = b
                j += 1
            out.append(held if held is not None and at >= stop else none)
        return out

    def coming(self, node: int, f: int) -> bool:
        """Whether file ``f`` is on its way to ``node``."""
        moves = self._inflight.get(node)
        return moves is not None and f in moves

    def coming_to(self, f: int) -> AbstractSet[int]:
        """The servers file ``f`` is on its way to."""
        return self._coming.get(f, _NOWHERE)

    # -- placing and starting -----------------------------------------------------------------

    def _place(self, sched: SchedulerView, item: Item, node: int) -> None:
        """Send ``item`` (taken out of the queue) to ``node``: pin what is there, bring what
        is not, start it if nothing is missing. Files that do not fit in the room the
        server's other jobs leave in its cache are not staged: the job reads them from the
        archive as it runs."""
        item.node = node
        self._placed[item.seq] = item
        self._staged[node] = self._staged.get(node, 0) + 1
        self._recount(sched, node)
        files = sched.space.files
        held = self._held.setdefault(node, {})
        room = sched.topology.nodes[node].cache_bytes
        room -= sum(files[f].n_bytes for f in held)
        for f in item.files:
            if f not in held:
                size = files[f].n_bytes
                if size > room:
                    item.remote = True
                    self.unstaged_files += 1
                    continue
                room -= size
            held[f] = held.get(f, 0) + 1
            item.held.append(f)
            if self._cached(sched, node, f):
                item.tokens.append(sched.pin(node, files[f].events))
            elif self.coming(node, f):
                self._inflight[node][f].waiters.append(item)
                item.waiting.add(f)
            else:
                self._bring(sched, item, node, f, from_archive=False)
        if not item.waiting:
            self._start(sched, item)

    def _unhold(self, node: int, item: Item, f: int) -> None:
        item.held.remove(f)
        held = self._held.get(node)
        if held is not None and f in held:
            held[f] -= 1
            if not held[f]:
                del held[f]

    def _bring(
        self, sched: SchedulerView, item: Item, node: int, f: int, *, from_archive: bool
    ) -> None:
        """Bring file ``f`` to ``node`` for ``item`` (joining a transfer already bringing it)."""
        item.waiting.add(f)
        moves = self._inflight.setdefault(node, {})
        move = moves.get(f)
        if move is not None:
            move.waiters.append(item)
            return
        move = moves[f] = _Move(None, [item])
        self._moving[f] = self._moving.get(f, 0) + 1
        self._coming.setdefault(f, set()).add(node)
        self._issue(sched, node, f, move, from_archive=from_archive)

    def _issue(
        self, sched: SchedulerView, node: int, f: int, move: _Move, *, from_archive: bool
    ) -> None:
        """Start ``move``: a local copy from the holder sending the fewest copies; else, if
        the file is on its way to another server, a local copy from there once it has landed;
        else a remote copy from the archive."""
        events = sched.space.files[f].events
        move.after = -1
        if not from_archive:
            peers = [h for h in self.holders(sched, f) if h != node and not sched.is_lost(h)]
            if peers:
                source = min(peers, key=lambda h: (self._sending.get(h, 0), h))
                sched.replicate(source, node, events)
                self._sending[source] = self._sending.get(source, 0) + 1
                move.source = source
                self.local_copies += 1
                return
            inflight = self._inflight
            ahead = [
                n
                for n in self.coming_to(f)
                if n != node and inflight[n][f].after < 0 and not sched.is_lost(n)
            ]
            if ahead:
                first = min(ahead, key=lambda h: (self._sending.get(h, 0), h))
                move.after = first
                self._chained.setdefault((first, f), []).append(node)
                return
        sched.fetch(node, events)
        move.source = None
        self.remote_copies += 1

    def _moved(self, node: int, f: int, move: _Move) -> None:
        """``move`` of file ``f`` to ``node`` is over (done, or its server lost): the books
        of transfers."""
        if move.source is not None and move.after < 0:
            self._sending[move.source] -= 1
        n = self._moving[f] - 1
        if n:
            self._moving[f] = n
        else:
            del self._moving[f]
        coming = self._coming[f]
        coming.discard(node)
        if not coming:
            del self._coming[f]

    def _unchain(self, sched: SchedulerView, node: int, f: int) -> None:
        """File ``f`` has landed on ``node`` (or will not): start the copies waiting for it."""
        for later in self._chained.pop((node, f), ()):
            move = self._inflight.get(later, {}).get(f)
            if move is None or move.after != node:
                continue  # that server was lost meanwhile
            if any(self._placed.get(i.seq) is i and i.node == later for i in move.waiters):
                self._issue(sched, later, f, move, from_archive=False)
            else:
                del self._inflight[later][f]  # nobody waits for it any more
                self._moved(later, f, move)

    def on_its_way(self, f: int) -> bool:
        """Whether file ``f`` is on its way to some server."""
        return f in self._moving

    def _start(self, sched: SchedulerView, item: Item) -> None:
        node = item.node
        slot = next((s for s in sched.slots_of(node) if sched.is_idle(s)), None)
        if slot is None:
            raise RuntimeError(f"node {node} has no free slot for a job placed on it")
        del self._placed[item.seq]
        self._staged[node] -= 1
        js = sched.jobs[item.job_id]
        sj = item.subjob if item.subjob is not None else sched.new_subjob(js, item.data)
        old = self._running.pop(slot, None)
        if old is not None:
            self._release(sched, old[1])
        self._running[slot] = (sj.subjob_id, item)
        self._fill[sj.subjob_id] = not item.remote
        sched.start(sj, slot)  # one slot busier, one fewer held: its free slots stay

    def _release(self, sched: SchedulerView, item: Item) -> None:
        """Unpin the item's files and give back the room it held."""
        for token in item.tokens:
            sched.release_pin(item.node, token)
        item.tokens = []
        for f in list(item.held):
            self._unhold(item.node, item, f)

    def _reap(self, sched: SchedulerView, slot: int | None = None) -> None:
        """Release the pins of the items whose subjobs have left their slots (``slot`` just
        freed, and any other when the count says so)."""
        if slot is not None:
            self._reap_slot(sched, slot)
        if len(self._running) > len(sched.running):
            for s in list(self._running):
                self._reap_slot(sched, s)
        jobs = sched.jobs
        if len(self._job_seq) > len(jobs) + 64:
            self._job_seq = {j: q for j, q in self._job_seq.items() if j in jobs}

    def _reap_slot(self, sched: SchedulerView, slot: int) -> None:
        entry = self._running.get(slot)
        if entry is None:
            return
        r = sched.running.get(slot)
        if r is None or r.subjob.subjob_id != entry[0]:
            del self._running[slot]
            self._release(sched, entry[1])
