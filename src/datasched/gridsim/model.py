"""The data grid a simulation runs on (ranganathan-foster §3, §5.1): its settings, the tiered
topology of its sites, and the datasets and users drawn from a seed.

The paper gives the sizes (Table 1) but not the processors and storage per site beyond
"2-5", nor the topology's shape, nor the replication threshold; :class:`GridConfig` holds our
choices, stated in the report and varied in its sensitivity table.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from datasched.core.model import Link
from datasched.core.policy import ParamError
from datasched.policies.registry import available, build_policy

__all__ = [
    "GB",
    "LOCAL_SCHEDULERS",
    "MB",
    "GridConfig",
    "GridError",
    "GridLayout",
    "TierTree",
    "draw_dataset",
    "layout",
]

MB = 1e6
GB = 1e9
LOCAL_SCHEDULERS = ("fifo", "data-ready")
"""The grid's own local schedulers: the paper's FIFO (the head of the queue waits for its data
and holds the jobs behind it), or data-ready (a free processor takes the first queued job whose
data has landed). Any other name is a registered cluster policy, run by the site's own core
scheduler over processors with node caches (:mod:`datasched.gridsim.site`)."""


class GridError(ValueError):
    """A bad grid setting; ``field`` names it."""

    def __init__(self, field_name: str, reason: str) -> None:
        self.field = field_name
        self.reason = reason
        super().__init__(f"{field_name}: {reason}")


@dataclass(frozen=True, slots=True)
class GridConfig:
    """One grid experiment's settings (Table 1 of ranganathan-foster, and our choices)."""

    users: int = 120
    sites: int = 30
    datasets: int = 200
    jobs: int = 6000
    bandwidth_mb_s: float = 10.0
    """Every link's bandwidth (MB/s, 10^6 bytes): scenario 1 is 10, scenario 2 100."""
    procs: tuple[int, int] = (2, 5)
    """Processors per site, drawn uniformly in this range (Table 1: "2-5")."""
    cache_gb: float = 10.0
    """Storage per site beyond its initial replicas, for fetched and replicated datasets
    (LRU): ours; the paper says only "limited"."""
    tier1: int = 5
    """Sites in tier 1 under the tier-0 site; the rest form tier 2, spread evenly under
    them (GriPhyN's hierarchy; the shape is ours)."""
    size_mb: tuple[float, float] = (500.0, 2000.0)
    compute_s_per_gb: float = 300.0
    popularity_p: float = 0.05
    """The geometric distribution's parameter over each user's ranking of the datasets."""
    shared_ranking: float = 1.0
    """The share of users who rank the datasets in the community's order; the others rank
    them in an order of their own. 1: every user focuses on the same datasets (Fig. 2)."""
    local: str = "fifo"
    """A site's local scheduler: ``fifo`` (the paper's), ``data-ready``, or the name of a
    registered cluster policy (the site's processors then have node caches)."""
    local_params: tuple[tuple[str, object], ...] = ()
    """The cluster policy's parameters, as (name, value) pairs."""
    node_cache_gb: float = 2.0
    """Each processor's cache, with a cluster policy (ours; the paper has none)."""
    lan_mb_s: float = 12.5
    """Each processor's rate reading the site's storage or a peer's cache, with a cluster
    policy (ours: Fast Ethernet; the paper's processors read the site's storage for free)."""
    events_per_gb: int = 1000
    """The events of a dataset the cluster policy sees, per GB (one file per dataset)."""
    seed: int = 0

    @property
    def cluster_policy(self) -> bool:
        """Whether the sites run a registered cluster policy (not the grid's own)."""
        return self.local not in LOCAL_SCHEDULERS

    def check(self) -> None:
        for name in ("users", "sites", "datasets", "jobs"):
            if getattr(self, name) < 1:
                raise GridError(name, "must be at least 1")
        if self.users % self.sites:
            raise GridError("users", f"{self.users} users do not map evenly to {self.sites} sites")
        if self.jobs % self.users:
            raise GridError("jobs", f"{self.jobs} jobs do not split evenly among the users")
        if not self.bandwidth_mb_s > 0:
            raise GridError("bandwidth_mb_s", "must be positive")
        if not 1 <= self.procs[0] <= self.procs[1]:
            raise GridError("procs", "must be a range of at least one processor")
        if self.cache_gb < 0:
            raise GridError("cache_gb", "must not be negative")
        if not 1 <= self.tier1 < self.sites:
            raise GridError("tier1", "must leave at least the tier-0 site outside tier 1")
        if not 0 < self.size_mb[0] <= self.size_mb[1]:
            raise GridError("size_mb", "must be a range of positive sizes")
        if not 0 < self.popularity_p < 1:
            raise GridError("popularity_p", "must be in (0, 1)")
        if not 0 <= self.shared_ranking <= 1:
            raise GridError("shared_ranking", "must be in [0, 1]")
        self._check_local()

    def _check_local(self) -> None:
        if not self.cluster_policy:
            if self.local_params:
                raise GridError("local_params", f"{self.local} takes no parameters")
            return
        known = available()
        if self.local not in known:
            names = ", ".join((*LOCAL_SCHEDULERS, *sorted(known)))
            raise GridError("local", f"unknown local scheduler {self.local!r} (known: {names})")
        if not self.node_cache_gb >= 0:
            raise GridError("node_cache_gb", "must not be negative")
        if not self.lan_mb_s > 0:
            raise GridError("lan_mb_s", "must be positive")
        if not (isinstance(self.events_per_gb, int) and self.events_per_gb >= 1):
            raise GridError("events_per_gb", "must be a whole number >= 1")
        try:
            build_policy(self.local, **dict(self.local_params))
        except (ParamError, TypeError, ValueError) as exc:
            raise GridError("local_params", str(exc)) from exc


class TierTree:
    """Sites as a tree: site 0 is tier 0, sites 1..tier1 tier 1, the rest tier 2 spread
    round robin under tier 1. One link per site to its parent, all of one bandwidth."""

    def __init__(self, sites: int, tier1: int, bytes_per_s: float) -> None:
        self.parent = [-1] + [0] * tier1 + [1 + i % tier1 for i in range(sites - 1 - tier1)]
        self.depth = [0] + [1] * tier1 + [2] * (sites - 1 - tier1)
        self.up = [None] + [
            Link(f"site:{s}", f"site:{self.parent[s]}", bytes_per_s) for s in range(1, sites)
        ]
        self._paths: dict[tuple[int, int], tuple[Link, ...]] = {}

    def path(self, a: int, b: int) -> tuple[Link, ...]:
        """The links from site ``a`` to site ``b``, through their nearest common ancestor."""
        key = (a, b)
        got = self._paths.get(key)
        if got is not None:
            return got
        left: list[Link] = []
        right: list[Link] = []
        x, y = a, b
        while x != y:
            if self.depth[x] >= self.depth[y]:
                link = self.up[x]
                assert link is not None
                left.append(link)
                x = self.parent[x]
            else:
                link = self.up[y]
                assert link is not None
                right.append(link)
                y = self.parent[y]
        got = tuple(left + right[::-1])
        self._paths[key] = got
        return got

    def hops(self, a: int, b: int) -> int:
        """``len(path(a, b))``, counted up the tree without making (and keeping) the path:
        every pair's is asked once a run, to order each site's neighbours."""
        depth, parent = self.depth, self.parent
        n = 0
        while a != b:
            if depth[a] >= depth[b]:
                a = parent[a]
            else:
                b = parent[b]
            n += 1
        return n


@dataclass(frozen=True, slots=True)
class GridLayout:
    """What a seed draws: processors per site, dataset sizes and initial homes, each user's
    site and ranking of the datasets."""

    procs: tuple[int, ...]
    size_bytes: tuple[float, ...]
    home: tuple[int, ...]
    user_site: tuple[int, ...]
    ranking: tuple[tuple[int, ...], ...]


def layout(cfg: GridConfig) -> GridLayout:
    """The grid of ``cfg.seed``: datasets spread evenly over the sites (one replica each, in
    a random order), users mapped evenly to sites."""
    rng = random.Random(f"grid-layout-{cfg.seed}")
    procs = tuple(rng.randint(*cfg.procs) for _ in range(cfg.sites))
    sizes = tuple(rng.uniform(*cfg.size_mb) * MB for _ in range(cfg.datasets))
    homes = [d % cfg.sites for d in range(cfg.datasets)]
    rng.shuffle(homes)
    community = list(range(cfg.datasets))
    rng.shuffle(community)
    ranking = []
    for _ in range(cfg.users):
        if rng.random() < cfg.shared_ranking:
            ranking.append(tuple(community))
        else:
            own = list(community)
            rng.shuffle(own)
            ranking.append(tuple(own))
    per_site = cfg.users // cfg.sites
    user_site = tuple(u // per_site for u in range(cfg.users))
    return GridLayout(procs, sizes, tuple(homes), user_site, tuple(ranking))


def draw_dataset(rng: random.Random, ranking: tuple[int, ...], p: float) -> int:
    """A dataset by its rank in ``ranking``, the rank geometric (p), wrapped past the end."""
    k = 0
    while rng.random() >= p:
        k += 1
    return ranking[k % len(ranking)]
