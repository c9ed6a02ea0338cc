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
        caps = self.capacities(sched)
        while caps:
            item = self._head()
            if item is None:
                return
            nodes = sorted(caps)
            node = next((n for n in nodes if n >= self._next), nodes[0])
            self._next = node + 1
            self._take(item)
            self._place(sched, item, node)
            caps[node] -= 1
            if not caps[node]:
                del caps[node]


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
        caps = self.capacities(sched)
        while caps:
            heads = [h for h in map(self._class_head, list(self._classes)) if h is not None]
            if not heads:
                return
            heads.sort(key=lambda i: i.seq)
            widest = min(caps, key=lambda n: (-caps[n], n))
            best: tuple[float, int, Item] | None = None
            known: dict[int, frozenset[int]] = {}
            for item in heads:
                cost, node = self._cheapest(sched, item.files, caps, widest, known)
                if best is None or cost < best[0]:
                    best = (cost, node, item)
                    if cost == 0:
                        break  # the early exit: nothing to move
            assert best is not None
            _, node, item = best
            self._take(item)
            self._place(sched, item, node)
            caps[node] -= 1
            if not caps[node]:
                del caps[node]

    def _cheapest(
        self,
        sched: SchedulerView,
        files: tuple[int, ...],
        caps: dict[int, int],
        widest: int,
        known: dict[int, frozenset[int]],
    ) -> tuple[float, int]:
        """The cheapest server for a job needing ``files``, and its cost."""
        space_files = sched.space.files

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
            zero = [n for n in caps if n in held(f) or self.coming(n, f)]
            if zero:
                return 0.0, min(zero, key=lambda n: (-caps[n], n))
            return elsewhere(f), widest
        best = (float("inf"), -1, -1)
        for n in caps:
            cost = sum(elsewhere(f) for f in files if not (n in held(f) or self.coming(n, f)))
            key = (cost, -caps[n], n)
            if key < best:
                best = key
        return best[0], best[2]
