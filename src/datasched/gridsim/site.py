"""A grid site whose local scheduler is one of our cluster policies: the site's
processors are the nodes of a core :class:`~datasched.core.scheduler.Scheduler`, one slot
each, with a node cache of ``GridConfig.node_cache_gb``.

A grid job whose dataset has landed in the site's storage becomes a core job over that
dataset's events (``GridConfig.events_per_gb`` events per GB, the dataset one file). For the
core, the site's storage is tertiary storage: an event a processor's cache does not hold is
read over the site's LAN at ``GridConfig.lan_mb_s`` (each processor at that rate; reads do not
share it), then computed at ``compute_s_per_gb``; a read from a processor's own cache costs
only the compute. A policy that splits runs parts of one grid job on several processors; the
grid job ends when its last part ends.

Each site is a :class:`~datasched.sim.engine.SimEngine` stepped one heap entry at a time by
the grid's clock (:class:`SiteEngine`, through the engine's public ``peek``, ``step`` and
``submit``): the core's actions become the engine's timed events
and its events go back to the core exactly as in a single-cluster simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from datasched.core.actions import Assign, JobCompleted, Start
from datasched.core.data import CacheGrain, DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Node, Source, Topology
from datasched.core.scheduler import Scheduler
from datasched.gridsim.model import GB, MB, GridConfig
from datasched.policies.registry import build_policy
from datasched.sim.engine import SimEngine

__all__ = ["CoreSites", "SiteEngine", "grid_data_space"]

LOCAL_DISK_BYTES_PER_S = 1e12
"""A processor's reads from its own cache: taken as free beside the compute (1 TB/s)."""

Started = Callable[[int, int], None]
"""(site, grid job id): the job's first part started computing."""
Ended = Callable[[int, int], None]
"""(site, grid job id): the job's last part ended."""


def grid_data_space(sizes_bytes: Sequence[float], events_per_gb: int) -> DataSpace:
    """The grid's datasets as one event space of range-grained caches: dataset ``d`` is one
    file of ``round(size / GB * events_per_gb)`` events (at least one), of one size each."""
    space = DataSpace(CacheGrain.RANGE)
    per_event = GB / events_per_gb
    for d, size in enumerate(sizes_bytes):
        n = max(1, round(size / GB * events_per_gb))
        space.add_dataset(f"dataset{d}", [FileSpec(f"dataset{d}", n, round(n * per_event))])
    space.uniform_bytes_per_event = per_event
    return space


class SiteEngine(SimEngine):
    """One site's processors as a simulated core cluster, driven from outside through the
    engine's public steps: the grid submits jobs (:meth:`SimEngine.submit`) and steps the
    engine (:meth:`SimEngine.step`) whenever its next entry (:meth:`SimEngine.peek`) is the
    earliest of the grid's."""

    def __init__(
        self,
        scheduler: Scheduler,
        site: int,
        started: Started,
        ended: Ended,
        *,
        check_conservation: bool = False,
    ) -> None:
        super().__init__(scheduler, check_conservation=check_conservation)
        self.site = site
        self._on_started = started
        self._on_ended = ended
        self._began: set[int] = set()

    def on_start(self, action: Start | Assign) -> None:
        super().on_start(action)
        job_id = action.subjob.job_id
        if job_id not in self._began:
            self._began.add(job_id)
            self._on_started(self.site, job_id)

    def on_job_completed(self, action: JobCompleted) -> None:
        super().on_job_completed(action)
        self._began.discard(action.job_id)
        self._on_ended(self.site, action.job_id)  # the user's next job is the grid's business

    def lan_bytes(self) -> float:
        """Bytes moved over the site's LAN: events read from the site's storage or another
        processor's cache, and whatever the policy fetched or replicated into caches."""
        run = self.rec.run
        per_event = self.space.uniform_bytes_per_event
        assert per_event is not None
        remote = run.events_by_source[Source.PEER] + run.events_by_source[Source.TERTIARY]
        return remote * per_event + run.bytes_transferred

    def busy_s(self, job_id: int) -> float:
        """Processor-seconds the job's parts took (reading and computing)."""
        return self.rec.times[job_id].busy_s

    def processed(self, job_id: int) -> list[IntervalSet]:
        """Every piece of ``job_id`` a processor computed (with ``check_conservation``)."""
        assert self.rec.run.processed is not None, "built without check_conservation"
        return self.rec.run.processed[job_id]


class CoreSites:
    """Every site of a grid as a :class:`SiteEngine` running ``cfg.local``'s policy."""

    def __init__(
        self,
        cfg: GridConfig,
        procs: Sequence[int],
        sizes_bytes: Sequence[float],
        started: Started,
        ended: Ended,
        *,
        check_conservation: bool = False,
    ) -> None:
        self.space = grid_data_space(sizes_bytes, cfg.events_per_gb)
        self._first = [f.start for f in self.space.files]
        self._stop = [f.stop for f in self.space.files]
        lan = cfg.lan_mb_s * MB
        cost = CostModel(
            cpu_s_per_event=cfg.compute_s_per_gb / cfg.events_per_gb,
            disk_bytes_per_s=LOCAL_DISK_BYTES_PER_S,
        )
        params: dict[str, Any] = dict(cfg.local_params)
        self.engines: list[SiteEngine] = []
        for site, n in enumerate(procs):
            nodes = tuple(
                Node(
                    i,
                    cfg.node_cache_gb * GB,
                    slots=1,
                    tertiary_bytes_per_s=lan,
                    network_bytes_per_s=lan,
                )
                for i in range(n)
            )
            sched = Scheduler(
                Topology(nodes), self.space, build_policy(cfg.local, **params), cost=cost
            )
            self.engines.append(
                SiteEngine(sched, site, started, ended, check_conservation=check_conservation)
            )

    def submit(self, site: int, job_id: int, user: int, dataset: int, now: float) -> None:
        data = IntervalSet.range(self._first[dataset], self._stop[dataset])
        self.engines[site].submit(Job(job_id, now, data, user=f"user{user}"), now)

    def next(self) -> tuple[float, int]:
        """The earliest next entry of any site (the lowest site on ties), and its site."""
        best, where = math.inf, -1
        for site, engine in enumerate(self.engines):
            t = engine.peek()
            if t < best:
                best, where = t, site
        return best, where

    def step(self, site: int) -> None:
        self.engines[site].step()

    def events_of(self, dataset: int) -> IntervalSet:
        return IntervalSet.range(self._first[dataset], self._stop[dataset])

    def lan_bytes(self) -> float:
        return sum(e.lan_bytes() for e in self.engines)
