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

Batches run every ``lp_period_s`` (the paper's delays between successive LPs): an event that
could place a job (an arrival, a freed slot, work given back) asks for a batch, which runs at
once with a period of 0 and otherwise that many seconds later, whatever else is asked
meanwhile.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from datasched.core.policy import DEFAULT, Param, ParamError, SchedulerView
from datasched.policies.cosched.mincostflow import NETWORKS, Batch, Network, solve
from datasched.policies.cosched.model import LOCAL_COST, REMOTE_COST, CoScheduling
from datasched.policies.registry import register

__all__ = ["MinCostFlow"]


@register
class MinCostFlow(CoScheduling):
    """Queued jobs placed in batches by the min-cost flow of the paper's network (romosan,
    "Linear Programming"; see the module docstring)."""

    name = "mincostflow"
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

    def run_batch(self, sched: SchedulerView) -> None:
        """Solve one batch now and place its jobs."""
        caps = self.capacities(sched)
        if not caps or not self._items:
            return
        batch, files, nodes = self.batch(sched, caps)
        self.batches += 1
        self.batch_edges = max(self.batch_edges, batch.n_files * batch.n_servers)
        result = solve(batch, self.network)
        for f, s, units in zip(
            result.files.tolist(), result.servers.tolist(), result.units.tolist(), strict=True
        ):
            node = nodes[s]
            for _ in range(units):
                item = self._first_needing(files[f])
                if item is None or caps.get(node, 0) <= 0:
                    break
                self._take(item)
                self._place(sched, item, node)
                caps[node] -= 1
        # Multi-file jobs may leave units without a job: the earliest jobs take the rest.
        for node in sorted(caps):
            while caps[node] > 0:
                item = self._head()
                if item is None:
                    return
                self.leftover += 1
                self._take(item)
                self._place(sched, item, node)
                caps[node] -= 1
