"""``mincostflow``: romosan's linear-programming policy, the queued jobs placed in batches by a
min-cost flow on the paper's file-to-server network (:mod:`datasched.policies.cosched.mincostflow`).

A batch takes the files the queued jobs need (popularity: how many queued jobs need each), the
servers with free slots (less those held by jobs placed and waiting for files), and the cost of
each file on each server: 0 where the server caches the file or it is on its way there, ``l``
where another server caches it or it is on its way to another server, ``r`` where neither. Its
flow, min(queued jobs, free slots) units, says how many jobs of each file go to each server;
each unit places the earliest queued job needing that file there (its files are then copied as
in every policy of the paper: :mod:`datasched.policies.cosched.model`). A job needing several files
counts in each file's popularity; a unit finding no job left for its file, and free slots left
over that way, are given to the earliest queued jobs in server order (never with single-file
jobs).

The servers holding none of the queued files (nor any on its way there) cost the same to every
file, so they enter the network as one group per free-slot count (:mod:`datasched.policies.
cosched.mincostflow`); the units a group gets go to its servers from the lowest id up, each
filled to its free slots before the next. The servers with free slots are kept by count as
slots fill and free (:meth:`CoScheduling.free_slots`), so that a batch costs what its files,
their holders and the distinct counts cost, not a pass over the cluster. With ``network=full``
the batch is the paper's network, every free server apart.

Batches run every ``lp_period_s`` (the paper's delays between successive LPs): an event that
could place a job (an arrival, a freed slot, work given back) asks for a batch, which runs at
once with a period of 0 and otherwise that many seconds later, whatever else is asked
meanwhile.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from datasched.core.policy import DEFAULT, Param, ParamError, SchedulerView
from datasched.policies.cosched.freeslots import FreeSlots
from datasched.policies.cosched.mincostflow import NETWORKS, Batch, BatchFlow, Network, solve
from datasched.policies.cosched.model import LOCAL_COST, REMOTE_COST, CoScheduling
from datasched.policies.registry import register

__all__ = ["MinCostFlow"]


@register
class MinCostFlow(CoScheduling):
    """Queued jobs placed in batches by the min-cost flow of the paper's network (romosan,
    "Linear Programming"; see the module docstring)."""

    name = "mincostflow"
    keeps_free_slots = True
    section = "romosan, Linear Programming"
    summary = "batches of queued jobs placed by a min-cost flow on the file-to-server network"
    params: ClassVar[tuple[Param, ...]] = (
        LOCAL_COST,
        REMOTE_COST,
        Param(
            "lp_period_s",
            float,
            0.0,
            "seconds between successive batches (0: a batch whenever a job could be placed)",
            low=0.0,
            unit="seconds",
        ),
        Param(
            "network",
            str,
            "grouped",
            "the flow network: grouped (servers by free-slot count, same optimum) or full",
            choices=NETWORKS,
        ),
    )

    def __init__(
        self,
        *,
        local_cost: float = DEFAULT,
        remote_cost: float = DEFAULT,
        lp_period_s: float = DEFAULT,
        network: str = DEFAULT,
    ) -> None:
        super().__init__()
        self.local_cost = local_cost
        self.remote_cost = remote_cost
        self.lp_period_s = lp_period_s
        if network not in NETWORKS:
            listed = ", ".join(NETWORKS)
            raise ParamError(self.name, "network", f"must be one of {listed}, got {network!r}")
        self.network: Network = "full" if network == "full" else "grouped"
        self._wake_pending = False
        self.batches = 0
        self.batch_edges = 0
        """File-to-server edges of the largest batch (the paper's x axis)."""
        self.leftover = 0

    def counters(self) -> dict[str, int]:
        return {
            **super().counters(),
            "batches": self.batches,
            "max_batch_edges": self.batch_edges,
            "leftover_placements": self.leftover,
        }

    # held_jobs stays 0: jobs wait for the next batch on purpose, but at most one period.

    def max_delay_s(self) -> float:
        return self.lp_period_s

    def _dispatch(self, sched: SchedulerView) -> None:
        if not self._items:
            return
        if self.lp_period_s <= 0:
            self.run_batch(sched)
        elif not self._wake_pending:
            self._wake_pending = True
            sched.wake_at(sched.now + self.lp_period_s)

    def tick(self, sched: SchedulerView) -> None:
        self._wake_pending = False
        self.run_batch(sched)

    def batch(
        self, sched: SchedulerView, caps: dict[int, int]
    ) -> tuple[Batch, list[int], list[int]]:
        """The network of the queued jobs and the servers of ``caps``: the batch, its files
        (the data space's file indices) and its servers (node ids), in the batch's order."""
        files = sorted(self._popularity)
        nodes = sorted(caps)
        column = {n: i for i, n in enumerate(nodes)}
        ptr = [0]
        idx: list[int] = []
        has_copy = []
        for f, held in zip(files, self.holders_of(sched, files), strict=True):
            zero = [column[n] for n in held if n in column]
            moving = self.on_its_way(f)
            if moving:
                zero += [column[n] for n in self.coming_to(f) if n in column]
                zero = sorted(set(zero))
            elif len(zero) > 1:
                zero.sort()
            idx += zero
            ptr.append(len(idx))
            has_copy.append(moving or bool(held))
        popularity = self._popularity
        batch = Batch(
            popularity=np.array([popularity[f] for f in files], dtype=np.int64),
            free=np.array([caps[n] for n in nodes], dtype=np.int64),
            zero_ptr=np.array(ptr, dtype=np.int64),
            zero_idx=np.array(idx, dtype=np.int64),
            has_copy=np.array(has_copy, dtype=np.bool_),
            local_cost=self.local_cost,
            remote_cost=self.remote_cost,
        )
        return batch, files, nodes

    def grouped_batch(
        self, sched: SchedulerView, free: FreeSlots
    ) -> tuple[Batch, list[int], list[int]]:
        """The network of the queued jobs and the servers of ``free``, its servers holding
        none of the queued files (nor any on its way there) one group per free-slot count:
        the batch, its files and its servers (a node id, or -1 for a group), in the batch's
        order: the servers holding some file ascending, then the groups by count. Its size
        is that of the queued files, their holders and the distinct counts, not the
        cluster's."""
        files = sorted(self._popularity)
        rows: list[list[int]] = []
        has_copy: list[bool] = []
        special: set[int] = set()
        free_of = free.free
        nowhere: list[int] = []
        for f, held in zip(files, self.holders_of(sched, files), strict=True):
            moving = self.on_its_way(f)
            if held or moving:
                zero = [n for n in held if free_of(n) > 0]
                if moving:
                    zero += [n for n in self.coming_to(f) if free_of(n) > 0]
                special.update(zero)
                rows.append(zero)
                has_copy.append(True)
            else:
                rows.append(nowhere)
                has_copy.append(False)
        singles = sorted(special)
        column = {n: i for i, n in enumerate(singles)}
        ptr = [0]
        idx: list[int] = []
        for zero in rows:
            if zero:
                idx += sorted({column[n] for n in zero})
            ptr.append(len(idx))
        taken = Counter(free.free(n) for n in singles)
        groups = [(c, len(free.servers(c)) - taken[c]) for c in free.counts()]
        groups = [(c, m) for c, m in groups if m > 0]
        popularity = self._popularity
        batch = Batch(
            popularity=np.array([popularity[f] for f in files], dtype=np.int64),
            free=np.array([free.free(n) for n in singles] + [c for c, _ in groups], np.int64),
            zero_ptr=np.array(ptr, dtype=np.int64),
            zero_idx=np.array(idx, dtype=np.int64),
            has_copy=np.array(has_copy, dtype=np.bool_),
            local_cost=self.local_cost,
            remote_cost=self.remote_cost,
            count=np.array([1] * len(singles) + [m for _, m in groups], dtype=np.int64),
        )
        return batch, files, singles + [-1] * len(groups)

    def run_batch(self, sched: SchedulerView) -> None:
        """Solve one batch now and place its jobs."""
        free = self.free_slots(sched)
        if not len(free) or not self._items:
            return
        if self.network == "full":
            batch, files, nodes = self.batch(sched, free.as_dict())
        else:
            batch, files, nodes = self.grouped_batch(sched, free)
        self.batches += 1
        self.batch_edges = max(self.batch_edges, batch.n_files * batch.n_machines)
        result = solve(batch, self.network)
        for f, node, units in _handed_out(result, batch, nodes, free):
            for _ in range(units):
                item = self._first_needing(files[f])
                if item is None or free.free(node) <= 0:
                    break
                self._take(item)
                self._place(sched, item, node)
        # Multi-file jobs may leave units without a job: the earliest jobs take the rest, on
        # the lowest servers with free slots.
        while (lowest := self.free_slots(sched).lowest()) is not None:
            item = self._head()
            if item is None:
                return
            self.leftover += 1
            self._take(item)
            self._place(sched, item, lowest)


def _handed_out(
    result: BatchFlow, batch: Batch, nodes: list[int], free: FreeSlots
) -> list[tuple[int, int, int]]:
    """(file, node, units) of a batch's flow, by file then node: a group's units go to its
    servers from the lowest id up, each filled to its free slots before the next, the
    files' units in file order (any way is as cheap: see ``mincostflow``'s docstring)."""
    out: list[tuple[int, int, int]] = []
    to_group: dict[int, list[tuple[int, int]]] = {}
    for f, s, units in zip(
        result.files.tolist(), result.servers.tolist(), result.units.tolist(), strict=True
    ):
        node = nodes[s]
        if node >= 0:
            out.append((f, node, units))
        else:
            to_group.setdefault(s, []).append((f, units))
    if to_group:
        singles = {n for n in nodes if n >= 0}
        for s, wanted in to_group.items():
            count = int(batch.free[s])
            members = (n for n in free.servers(count) if n not in singles)
            node, room = -1, 0
            for f, units in wanted:
                while units:
                    if not room:
                        node, room = next(members), count
                    q = min(units, room)
                    out.append((f, node, q))
                    units -= q
                    room -= q
        out.sort()
    return out
