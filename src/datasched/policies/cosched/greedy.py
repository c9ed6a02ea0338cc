"""The two greedy policies of romosan's co-scheduling: ``fifo-roundrobin`` (the paper's FIFO,
its baseline) and ``sjf-data`` (its Shortest Job First, with data movement as the job's
length). The model and the books they share: :mod:`datasched.policies.cosched.model`."""

from __future__ import annotations

import heapq
from typing import ClassVar

from datasched.core.policy import DEFAULT, Param, SchedulerView
from datasched.policies.cosched.model import LOCAL_COST, REMOTE_COST, CoScheduling, Item
from datasched.policies.registry import register

__all__ = ["FifoRoundRobin", "ShortestDataFirst"]


@register
class FifoRoundRobin(CoScheduling):
    """Jobs in arrival order, servers in turn (romosan's FIFO: "grab job at head of queue",
    "choose next server in round-robin fashion")."""

    name = "fifo-roundrobin"
    section = "romosan, FIFO"
    summary = "jobs in arrival order, each on the next server in turn; its files copied there"

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def _dispatch(self, sched: SchedulerView) -> None:
        # The next server in turn from the index of free ones, not a pass over every server
        # (CoScheduling._free).
        while True:
            node = self._next_open(sched, self._next)
            if node is None:
                return
            item = self._head()
            if item is None:
                return
            self._next = node + 1
            self._take(item)
            self._place(sched, item, node)


@register
class ShortestDataFirst(CoScheduling):
    """The job with the cheapest data movement first (romosan's SJF: data movement as the
    first-order estimate of a job's time; per server, 0 for a file it caches, the file's size
    times ``l`` or ``r`` otherwise), with the early exit on a placement that moves nothing.

    Jobs needing the same files cost the same, so the queue is scanned per set of files (in
    order of their earliest job: the earliest job wins a tie); a server costs 0 for a file on
    its way there. Among servers of equal cost, the one with the most free slots, then the
    lowest id."""

    name = "sjf-data"
    section = "romosan, Shortest Job First"
    summary = "the job with the cheapest data movement first, on its cheapest server"
    params: ClassVar[tuple[Param, ...]] = (LOCAL_COST, REMOTE_COST)

    def __init__(self, *, local_cost: float = DEFAULT, remote_cost: float = DEFAULT) -> None:
        super().__init__()
        self.local_cost = local_cost
        self.remote_cost = remote_cost
        self._classes: dict[tuple[int, ...], list[int]] = {}
        """Set of files -> heap of the queued seqs needing exactly those."""

    def _enqueue(self, item: Item) -> None:
        super()._enqueue(item)
        heapq.heappush(self._classes.setdefault(item.files, []), item.seq)

    def _class_head(self, files: tuple[int, ...]) -> Item | None:
        heap = self._classes[files]
        while heap:
            item = self._items.get(heap[0])
            if item is not None and item.files == files:
                return item
            heapq.heappop(heap)
        del self._classes[files]
        return None

    def _dispatch(self, sched: SchedulerView) -> None:
        while True:
            # The widest server from the index of free ones, not a pass over every server
            # (CoScheduling._free).
            opened = self.widest_open(sched)
            if opened is None:
                return
            heads = [h for h in map(self._class_head, list(self._classes)) if h is not None]
            if not heads:
                return
            heads.sort(key=lambda i: i.seq)
            widest = opened[0]
            best: tuple[float, int, Item] | None = None
            known: dict[int, frozenset[int]] = {}
            for item in heads:
                cost, node = self._cheapest(sched, item.files, widest, known)
                if best is None or cost < best[0]:
                    best = (cost, node, item)
                    if cost == 0:
                        break  # the early exit: nothing to move
            assert best is not None
            _, node, item = best
            self._take(item)
            self._place(sched, item, node)

    def _cheapest(
        self,
        sched: SchedulerView,
        files: tuple[int, ...],
        widest: int,
        known: dict[int, frozenset[int]],
    ) -> tuple[float, int]:
        """The cheapest server with a free slot for a job needing ``files``, and its cost.

        Only the servers holding or receiving one of the files can cost less than all of
        them moved; of the others, ``widest`` (the most free slots, then the lowest id) wins
        any tie, so it stands for them all: no pass over every server (docs/scale.md)."""
        space_files = sched.space.files
        free_slots = self._free

        def held(f: int) -> frozenset[int]:
            h = known.get(f)
            if h is None:
                h = known[f] = self.holders(sched, f)
            return h

        def elsewhere(f: int) -> float:
            unit = self.local_cost if held(f) or self.on_its_way(f) else self.remote_cost
            return space_files[f].n_bytes * unit

        if len(files) == 1:
            (f,) = files
            caps = {
                n: free
                for n in (*held(f), *self.coming_to(f))
                if (free := free_slots(sched, n)) > 0
            }
            if caps:
                return 0.0, min(caps, key=lambda n: (-caps[n], n))
            return elsewhere(f), widest
        near: set[int] = {widest}
        for f in files:
            near.update(held(f))
            near.update(self.coming_to(f))
        best = (float("inf"), -1, -1)
        for n in near:
            free = free_slots(sched, n)
            if free <= 0:
                continue
            cost = sum(elsewhere(f) for f in files if not (n in held(f) or self.coming(n, f)))
            key = (cost, -free, n)
            if key < best:
                best = key
        return best[0], best[2]
