"""The data-grid simulator (ranganathan-foster §3, §5): sites of a few processors and limited
storage on a tiered tree of shared links, users each submitting jobs in strict sequence, an
external scheduler placing each job, a local scheduler at each site, and a dataset scheduler
replicating popular datasets.

A job's dataset is fetched from the nearest replica as soon as the job joins its site's queue
(the transfer overlaps the wait, §5.2), and the job computes only once the dataset is there.
Transfers share the links as a fluid (:mod:`datasched.sim.network`). Fetched and replicated
datasets are cached with LRU in the site's storage beyond its initial replicas; a dataset a
queued or running job needs is never evicted. Output is ignored (§5.1).

A site's local scheduler is the paper's FIFO, ``data-ready``, or one of our registered cluster
policies driving the site's processors and their node caches through the scheduling core
(:mod:`datasched.gridsim.site`): a job joins that site's core queue once its dataset has landed.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import overload

from datasched.gridsim.model import GB, MB, GridConfig, TierTree, draw_dataset, layout
from datasched.gridsim.site import CoreSites
from datasched.policies.grid.schedulers import (
    DatasetScheduler,
    ExternalScheduler,
    GridJob,
    build_grid_scheduler,
)
from datasched.sim.network import Network, Transfer

__all__ = ["GridResult", "GridRun", "GridSim", "run_grid"]

_SUBMIT, _END, _TRANSFER = 0, 1, 2


@dataclass(frozen=True, slots=True)
class GridRun:
    """One simulation: the grid, and the external and dataset schedulers by name."""

    cfg: GridConfig
    external: str
    dataset: str
    threshold: int = 5
    label: str = ""
    """What the run is for in a study (``pairs``, ``sensitivity: ...``)."""


@dataclass(frozen=True, slots=True)
class GridResult:
    """A run's measures (§5.2): response time, data moved per job, processors' idle time."""

    run: GridRun
    jobs: int
    mean_response_s: float
    mb_per_job: float
    fetch_mb_per_job: float
    replica_mb_per_job: float
    idle_pct: float
    makespan_s: float
    replicas: int
    evictions: int
    overflow_gb: float
    """The most a site's cache held past its size (datasets pinned by waiting jobs)."""
    lan_mb_per_job: float = 0.0
    """With a cluster policy at the sites: MB read over the sites' LANs per job (what the
    processors' caches did not hold, and what the policy fetched into them)."""


@dataclass(frozen=True, slots=True)
class _Move:
    """What a transfer is for: a job's fetch or a replica, of ``dataset`` to site ``to``."""

    why: str
    dataset: int
    to: int


def _move(tag: object) -> _Move:
    assert isinstance(tag, _Move)
    return tag


class _Without(Sequence[int]):
    """``near`` less the entries at ``places`` (ascending, no repeats), read in place: the
    sites a replica may go to out of every other site, without a copy of the list a decision
    (docs/scale.md)."""

    __slots__ = ("_near", "_places")

    def __init__(self, near: Sequence[int], places: Sequence[int]) -> None:
        self._near = near
        self._places = places

    def __len__(self) -> int:
        return len(self._near) - len(self._places)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("index out of range")
        for p in self._places:  # the i-th entry not left out
            if p > i:
                break
            i += 1
        return self._near[i]


@dataclass(slots=True)
class _Site:
    procs: int
    cache_bytes: float
    free: int
    queue: list[int] = field(default_factory=list)
    present: set[int] = field(default_factory=set)
    primary: set[int] = field(default_factory=set)
    cache: OrderedDict[int, float] = field(default_factory=OrderedDict)
    incoming: set[int] = field(default_factory=set)
    pins: dict[int, int] = field(default_factory=dict)
    running_ends: dict[int, float] = field(default_factory=dict)
    handed: set[int] = field(default_factory=set)
    """With a cluster policy: jobs in the site's core queue, no part started yet."""
    backlog_s: float = 0.0
    busy_s: float = 0.0


class GridSim:
    """One data-grid execution (§3), run to its last job by :meth:`run`.

    It is also the :class:`~datasched.policies.grid.schedulers.GridView` the schedulers read.
    """

    def __init__(
        self,
        cfg: GridConfig,
        external: ExternalScheduler,
        dataset: DatasetScheduler,
        *,
        check_conservation: bool = False,
    ) -> None:
        cfg.check()
        self.cfg = cfg
        self.external = external
        self.data = dataset
        self.grid = layout(cfg)
        bw = cfg.bandwidth_mb_s * MB
        self.tree = TierTree(cfg.sites, cfg.tier1, bw)
        self.net = Network()
        self.rng = random.Random(f"grid-run-{cfg.seed}")
        self.sites = [_Site(p, cfg.cache_gb * GB, p) for p in self.grid.procs]
        self._by_waiting: dict[int, list[int]] = {0: list(range(cfg.sites))}
        """Waiting jobs -> the sites with that many, in site order: the least loaded sites
        without a pass over the grid at every job (:meth:`least_waiting`, docs/scale.md)."""
        self._least = 0
        """The fewest waiting jobs of any site (a key of ``_by_waiting``)."""
        self._holders: dict[int, list[int]] = {}
        for d, home in enumerate(self.grid.home):
            self.sites[home].present.add(d)
            self.sites[home].primary.add(d)
            self._holders[d] = [home]
        hops = self.tree.hops
        self._near = [
            sorted((s for s in range(cfg.sites) if s != a), key=lambda b: (hops(a, b), b))
            for a in range(cfg.sites)
        ]
        self._near_from: list[dict[int, tuple[int, int]]] = []
        """Site -> hops -> where the sites that many hops away lie in its ``_near`` list (in
        site order there): a site's place in the list without a pass over it."""
        for a, near in enumerate(self._near):
            spans: dict[int, tuple[int, int]] = {}
            for i, b in enumerate(near):
                h = hops(a, b)
                lo = spans.get(h, (i, i))[0]
                spans[h] = (lo, i + 1)
            self._near_from.append(spans)
        self._inbound: dict[tuple[int, int], list[Transfer]] = {}
        """(dataset, site) -> the transfers bringing it there, oldest first: what
        :meth:`fetch_estimate_s` reads instead of a pass over every transfer in flight."""
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.jobs: list[GridJob] = []
        self.site_of: list[int] = []
        self.submitted: list[float] = []
        self.started: list[float] = []
        self.ended: list[float] = []
        self._left = [cfg.jobs // cfg.users] * cfg.users
        self._mean_compute_s = sum(self.grid.size_bytes) / len(self.grid.size_bytes) / GB
        self._mean_compute_s *= cfg.compute_s_per_gb
        self.fetch_bytes = 0.0
        self.replica_bytes = 0.0
        self.replicas = 0
        self.evictions = 0
        self.overflow = 0.0
        self.trace: list[tuple[float, str, int, int, int]] = []
        """(time, what, job or -1, site, dataset): ``submit``, ``start``, ``end``,
        ``landed``, ``evict``."""
        self.core: CoreSites | None = None
        """The sites' core schedulers, when they run a cluster policy."""
        if cfg.cluster_policy:
            self.core = CoreSites(
                cfg,
                self.grid.procs,
                self.grid.size_bytes,
                self._core_started,
                self._core_ended,
                check_conservation=check_conservation,
            )

    # -- the view the schedulers read -----------------------------------------------------

    @property
    def n_sites(self) -> int:
        return self.cfg.sites

    def waiting(self, site: int) -> int:
        s = self.sites[site]
        return len(s.queue) + len(s.handed)

    def least_waiting(self) -> Sequence[int]:
        return self._by_waiting[self._least]

    def _waiting_moved(self, site: int, before: int) -> None:
        """``site``'s waiting jobs changed from ``before``: ``_by_waiting`` follows."""
        after = self.waiting(site)
        if after == before:
            return
        bucket = self._by_waiting[before]
        del bucket[bisect_left(bucket, site)]
        if not bucket:
            del self._by_waiting[before]
        insort(self._by_waiting.setdefault(after, []), site)
        if after < self._least:
            self._least = after
        elif before == self._least and before not in self._by_waiting:
            self._least = min(self._by_waiting)

    def holders(self, dataset: int) -> Sequence[int]:
        return self._holders[dataset]

    def neighbours(self, site: int, k: int, without: Sequence[int] = ()) -> Sequence[int]:
        near = self._near[site]
        if not without:
            return near if k <= 0 else near[:k]
        if k > 0:
            skip = set(without)
            return [s for s in near[:k] if s not in skip]
        # Every other site but a few: their places in the list, not a filtered copy of it.
        spans = self._near_from[site]
        hops = self.tree.hops
        places = []
        for b in without:
            if b != site:
                lo, hi = spans[hops(site, b)]
                places.append(bisect_left(near, b, lo, hi))
        return _Without(near, sorted(places))

    def fetch_estimate_s(self, dataset: int, site: int) -> float:
        s = self.sites[site]
        if dataset in s.present:
            return 0.0
        inbound = self._inbound.get((dataset, site))
        if inbound:
            return inbound[0].eta() - self.now
        path = self.tree.path(self._source(dataset, site), site)
        rate = min(link.bytes_per_s / (self.net.count_on(link) + 1) for link in path)
        return self.grid.size_bytes[dataset] / rate

    def start_estimate_s(self, site: int) -> float:
        s = self.sites[site]
        if s.free and not s.queue and not s.handed:
            return 0.0
        # A part of a cluster policy's job may run past its compute time (reading data).
        running = sum(max(0.0, end - self.now) for end in s.running_ends.values())
        return (s.backlog_s + running) / s.procs

    # -- the simulation -------------------------------------------------------------------

    def run(self) -> GridResult:
        for user in range(self.cfg.users):
            self._submit(user)
        core = self.core
        while True:
            if core is not None:
                # A site's next entry first unless the grid has one as early (the grid's
                # events at one instant come first: a part that ended, then what it brings).
                at, site = core.next()
                if at < (self._events[0][0] if self._events else math.inf):
                    self.now = at
                    core.step(site)
                    continue
            if not self._events:
                break
            time, _, kind, a, b = heapq.heappop(self._events)
            self.now = time
            if kind == _END:
                self._end(a)
            elif kind == _TRANSFER:
                t = self.net.transfers.get(a)
                if t is not None and t.version == b:
                    self._landed(a)
            else:
                self._submit(a)
        return self._result()

    def _push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time, self._seq, kind, a, b))

    def _submit(self, user: int) -> None:
        if not self._left[user]:
            return
        self._left[user] -= 1
        d = draw_dataset(self.rng, self.grid.ranking[user], self.cfg.popularity_p)
        size = self.grid.size_bytes[d]
        job = GridJob(
            len(self.jobs),
            user,
            self.grid.user_site[user],
            d,
            size,
            self.cfg.compute_s_per_gb * size / GB,
        )
        self.jobs.append(job)
        site = self.external.choose(job, self, self.rng)
        if not 0 <= site < self.cfg.sites:
            raise ValueError(f"{self.external.name} chose site {site}, not a site of the grid")
        self.site_of.append(site)
        self.submitted.append(self.now)
        self.started.append(-1.0)
        self.ended.append(-1.0)
        s = self.sites[site]
        before = self.waiting(site)
        s.queue.append(job.job_id)
        self._waiting_moved(site, before)
        s.backlog_s += job.compute_s
        s.pins[d] = s.pins.get(d, 0) + 1
        self.trace.append((self.now, "submit", job.job_id, site, d))
        if d in s.present:
            self._touch(s, d)
        elif d not in s.incoming:
            self._transfer(d, site, "fetch")
        self._dispatch(site)

    def _source(self, dataset: int, site: int) -> int:
        """The replica nearest ``site`` (fewest hops, then fewest transfers on the way)."""

        def cost(h: int) -> tuple[int, int, int]:
            path = self.tree.path(h, site)
            return (len(path), sum(self.net.count_on(x) for x in path), h)

        return min(self._holders[dataset], key=cost)

    def _transfer(self, dataset: int, to: int, why: str, source: int | None = None) -> None:
        """Move ``dataset`` to site ``to``: from ``source`` (a replica the site's dataset
        scheduler pushes) or else from the nearest replica (a fetch)."""
        src = self._source(dataset, to) if source is None else source
        path = self.tree.path(src, to)
        size = self.grid.size_bytes[dataset]
        if why == "fetch":
            self.fetch_bytes += size
        else:
            self.replica_bytes += size
            self.replicas += 1
        self.sites[to].incoming.add(dataset)
        t, changed = self.net.start(path, size, self.now, tag=_Move(why, dataset, to))
        self._inbound.setdefault((dataset, to), []).append(t)
        for t in changed:
            self._push(t.eta(), _TRANSFER, t.transfer_id, t.version)

    def _landed(self, transfer_id: int) -> None:
        t, changed = self.net.finish(transfer_id, self.now)
        for x in changed:
            self._push(x.eta(), _TRANSFER, x.transfer_id, x.version)
        move = _move(t.tag)
        d, to = move.dataset, move.to
        inbound = self._inbound[d, to]
        inbound.remove(t)
        if not inbound:
            del self._inbound[d, to]
        s = self.sites[to]
        s.incoming.discard(d)
        s.present.add(d)
        self._holders[d] = sorted(self._holders[d] + [to])
        s.cache[d] = self.grid.size_bytes[d]
        self.trace.append((self.now, "landed", -1, to, d))
        self._evict(to)
        self._dispatch(to)

    def _touch(self, s: _Site, d: int) -> None:
        if d in s.cache:
            s.cache.move_to_end(d)

    def _evict(self, site: int) -> None:
        s = self.sites[site]
        used = sum(s.cache.values())
        for d in list(s.cache):
            if used <= s.cache_bytes:
                break
            if s.pins.get(d, 0) or d in s.primary:
                continue
            used -= s.cache.pop(d)
            s.present.discard(d)
            self._holders[d].remove(site)
            self.evictions += 1
            self.trace.append((self.now, "evict", -1, site, d))
        self.overflow = max(self.overflow, used - s.cache_bytes)

    def _dispatch(self, site: int) -> None:
        s = self.sites[site]
        if self.core is not None:
            # Every job whose data has landed joins the site's core queue, in queue order.
            ready = [j for j in s.queue if self.jobs[j].dataset in s.present]
            for j in ready:
                s.queue.remove(j)
                s.handed.add(j)
                job = self.jobs[j]
                self.core.submit(site, j, job.user, job.dataset, self.now)
            return
        fifo = self.cfg.local == "fifo"
        while s.free and s.queue:
            pick = -1
            for i, j in enumerate(s.queue):
                if self.jobs[j].dataset in s.present:
                    pick = i
                    break
                if fifo:
                    break
            if pick < 0:
                return
            job_id = s.queue.pop(pick)
            self._waiting_moved(site, len(s.queue) + 1 + len(s.handed))
            self._start(site, job_id)

    def _start(self, site: int, job_id: int) -> None:
        self.sites[site].free -= 1
        self._push(self.now + self.jobs[job_id].compute_s, _END, job_id)
        self._began(site, job_id)

    def _core_started(self, site: int, job_id: int) -> None:
        """A site's core started the first part of ``job_id``."""
        s = self.sites[site]
        if job_id in s.handed:
            s.handed.discard(job_id)
            self._waiting_moved(site, self.waiting(site) + 1)
        self._began(site, job_id)
        s.free = max(0, s.procs - len(s.running_ends))

    def _core_ended(self, site: int, job_id: int) -> None:
        """A site's core completed ``job_id``: the grid ends it next, at this instant."""
        self._push(self.now, _END, job_id)

    def _began(self, site: int, job_id: int) -> None:
        s = self.sites[site]
        job = self.jobs[job_id]
        s.backlog_s -= job.compute_s
        s.running_ends[job_id] = self.now + job.compute_s
        self.started[job_id] = self.now
        self._touch(s, job.dataset)
        self.trace.append((self.now, "start", job_id, site, job.dataset))
        target = self.data.on_access(site, job.dataset, self, self.rng)
        if target is not None and job.dataset not in self.sites[target].incoming:
            self._transfer(job.dataset, target, "replica", source=site)

    def _end(self, job_id: int) -> None:
        site = self.site_of[job_id]
        s = self.sites[site]
        job = self.jobs[job_id]
        del s.running_ends[job_id]
        if self.core is None:
            s.free += 1
            s.busy_s += job.compute_s
        else:
            s.busy_s += self.core.engines[site].busy_s(job_id)
            s.free = max(0, s.procs - len(s.running_ends))
        s.pins[job.dataset] -= 1
        if not s.pins[job.dataset]:
            del s.pins[job.dataset]
        self.ended[job_id] = self.now
        self.trace.append((self.now, "end", job_id, site, job.dataset))
        self._evict(site)
        self._dispatch(site)
        self._submit(job.user)

    def _result(self) -> GridResult:
        n = len(self.jobs)
        stuck = [j for j, end in enumerate(self.ended) if end < 0]
        if stuck or n < self.cfg.jobs:
            # A cluster policy that failed a job, or held it for ever: the user stops there.
            raise RuntimeError(
                f"local {self.cfg.local}: {len(stuck)} job(s) never completed "
                f"(first: {stuck[:3]}), {self.cfg.jobs - n} never submitted"
            )
        makespan = max(self.ended)
        capacity = sum(s.procs for s in self.sites) * makespan
        busy = sum(s.busy_s for s in self.sites)
        run = GridRun(self.cfg, self.external.name, self.data.name, self.data.threshold)
        return GridResult(
            run=run,
            jobs=n,
            mean_response_s=sum(e - s for e, s in zip(self.ended, self.submitted, strict=True)) / n,
            mb_per_job=(self.fetch_bytes + self.replica_bytes) / MB / n,
            fetch_mb_per_job=self.fetch_bytes / MB / n,
            replica_mb_per_job=self.replica_bytes / MB / n,
            idle_pct=100.0 * (1 - busy / capacity),
            makespan_s=makespan,
            replicas=self.replicas,
            evictions=self.evictions,
            overflow_gb=self.overflow / GB,
            lan_mb_per_job=0.0 if self.core is None else self.core.lan_bytes() / MB / n,
        )


def run_grid(run: GridRun) -> GridResult:
    """Simulate ``run`` (a module-level function, so runs go to worker processes)."""
    ext = build_grid_scheduler(run.external)
    params = {} if not build_grid_scheduler(run.dataset).params else {"threshold": run.threshold}
    ds = build_grid_scheduler(run.dataset, **params)
    if not isinstance(ext, ExternalScheduler) or not isinstance(ds, DatasetScheduler):
        raise ValueError(f"{run.external}/{run.dataset}: an external then a dataset scheduler")
    return replace(GridSim(run.cfg, ext, ds).run(), run=run)
