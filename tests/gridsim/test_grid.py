"""The data-grid simulator (ranganathan-foster §3-§5): data before compute, users in strict
sequence, every job run once, replication firing at its threshold, one result per seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from datasched.core.policy import ParamError
from datasched.gridsim.engine import GridRun, GridSim, run_grid
from datasched.gridsim.model import GridConfig, GridError, TierTree, layout
from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    DATA_LEAST_LOADED,
    DATA_RANDOM,
    JOB_ADAPTIVE,
    JOB_DATA_PRESENT,
    JOB_LEAST_LOADED,
    JOB_LOCAL,
    DatasetScheduler,
    ExternalScheduler,
    GridJob,
    GridRng,
    GridView,
    build_grid_scheduler,
    grid_schedulers,
)

SMALL = GridConfig(users=12, sites=6, datasets=20, jobs=96, tier1=2, cache_gb=3.0)
EXTERNAL = [n for n, c in grid_schedulers().items() if issubclass(c, ExternalScheduler)]
DATASET = [n for n, c in grid_schedulers().items() if issubclass(c, DatasetScheduler)]


def simulate(cfg: GridConfig, external: str, dataset: str, threshold: int = 2) -> GridSim:
    ext = build_grid_scheduler(external)
    params = {"threshold": threshold} if dataset != DATA_DO_NOTHING else {}
    ds = build_grid_scheduler(dataset, **params)
    assert isinstance(ext, ExternalScheduler)
    assert isinstance(ds, DatasetScheduler)
    sim = GridSim(cfg, ext, ds)
    sim.run()
    return sim


CASES = [(e, d, local) for e in EXTERNAL for d in DATASET for local in ("fifo", "data-ready")]


@pytest.mark.parametrize(("external", "dataset", "local"), CASES)
def test_data_is_there_before_a_job_computes_and_users_go_in_sequence(
    external: str, dataset: str, local: str
) -> None:
    """Replay the trace: a job starts only on a site holding its dataset (initially, or
    landed and not evicted since); a user's next job is submitted when the previous ends,
    never while it is out; every job starts and ends once."""
    cfg = replace(SMALL, local=local, bandwidth_mb_s=20.0)
    sim = simulate(cfg, external, dataset)
    present = {(site, d) for d, site in enumerate(sim.grid.home)}
    out: dict[int, int] = {}  # user -> job in the system
    last_end: dict[int, float] = {}
    started: set[int] = set()
    ended: set[int] = set()
    for time, what, job, site, d in sim.trace:
        if what == "landed":
            present.add((site, d))
        elif what == "evict":
            present.discard((site, d))
        elif what == "submit":
            user = sim.jobs[job].user
            assert user not in out, f"user {user} submitted job {job} with one still out"
            assert time == last_end.get(user, 0.0)
            out[user] = job
        elif what == "start":
            assert (site, d) in present, f"job {job} started at site {site} without dataset {d}"
            assert job not in started
            started.add(job)
        elif what == "end":
            assert job in started
            assert job not in ended
            ended.add(job)
            user = sim.jobs[job].user
            assert out.pop(user) == job
            last_end[user] = time
    assert len(ended) == cfg.jobs == len(sim.jobs)
    assert not out
    assert not sim.net.transfers


@pytest.mark.parametrize("local", ["fifo", "data-ready"])
def test_a_processor_idles_only_when_the_local_scheduler_has_nothing_to_start(local: str) -> None:
    """Replay the trace: whenever time moves on, a site with a free processor has no queued
    job it could start: under FIFO the head of the queue waits for its data (§5.2: "the
    datasets needed for the jobs in the queue are not yet available"); out of order, no
    queued job has its data."""
    sim = simulate(replace(SMALL, local=local), JOB_LOCAL, DATA_DO_NOTHING)
    present = {(site, d) for d, site in enumerate(sim.grid.home)}
    queue: dict[int, list[int]] = {s: [] for s in range(SMALL.sites)}
    running = dict.fromkeys(range(SMALL.sites), 0)
    now = 0.0
    checked = 0

    def check() -> None:
        for site, jobs in queue.items():
            if running[site] < sim.grid.procs[site] and jobs:
                ready = [(site, sim.jobs[j].dataset) in present for j in jobs]
                assert not (ready[0] if local == "fifo" else any(ready)), (now, site)

    for time, what, job, site, d in sim.trace:
        if time > now:
            check()
            checked += 1
            now = time
        if what == "landed":
            present.add((site, d))
        elif what == "evict":
            present.discard((site, d))
        elif what == "submit":
            queue[site].append(job)
        elif what == "start":
            queue[site].remove(job)
            running[site] += 1
        elif what == "end":
            running[site] -= 1
    check()
    assert checked > SMALL.jobs


def test_one_result_per_seed() -> None:
    run = GridRun(SMALL, JOB_DATA_PRESENT, DATA_RANDOM, 2)
    assert run_grid(run) == run_grid(run)
    other = run_grid(replace(run, cfg=replace(SMALL, seed=1)))
    assert other.mean_response_s != run_grid(run).mean_response_s


def test_job_data_present_runs_where_the_data_is_and_moves_none() -> None:
    sim = simulate(SMALL, JOB_DATA_PRESENT, DATA_DO_NOTHING)
    assert sim.fetch_bytes == 0.0
    assert sim.replica_bytes == 0.0
    for job, site in zip(sim.jobs, sim.site_of, strict=True):
        assert sim.grid.home[job.dataset] == site


def test_job_local_runs_at_the_users_site() -> None:
    sim = simulate(SMALL, JOB_LOCAL, DATA_LEAST_LOADED)
    assert all(j.origin == s for j, s in zip(sim.jobs, sim.site_of, strict=True))
    assert sim.fetch_bytes > 0


def test_adaptive_picks_among_its_three_candidates() -> None:
    sim = simulate(replace(SMALL, bandwidth_mb_s=1.0), JOB_ADAPTIVE, DATA_DO_NOTHING)
    assert len(set(sim.site_of)) > 1


class FakeView:
    """Six sites, one holding every dataset; loads as given."""

    def __init__(self, loads: Sequence[int], holders: Sequence[int] = (0,)) -> None:
        self.loads = list(loads)
        self._holders = list(holders)

    @property
    def n_sites(self) -> int:
        return len(self.loads)

    def waiting(self, site: int) -> int:
        return self.loads[site]

    def least_waiting(self) -> Sequence[int]:
        low = min(self.loads)
        return [s for s, n in enumerate(self.loads) if n == low]

    def holders(self, dataset: int) -> Sequence[int]:
        return self._holders

    def neighbours(self, site: int, k: int, without: Sequence[int] = ()) -> Sequence[int]:
        others = [s for s in range(len(self.loads)) if s != site]
        return [s for s in (others if k <= 0 else others[:k]) if s not in without]

    def fetch_estimate_s(self, dataset: int, site: int) -> float:
        return 0.0 if site in self._holders else 1000.0

    def start_estimate_s(self, site: int) -> float:
        return 100.0 * self.loads[site]


class FirstRng:
    def randrange(self, stop: int, /) -> int:
        return 0


@pytest.mark.parametrize("name", [DATA_RANDOM, DATA_LEAST_LOADED])
@pytest.mark.parametrize("threshold", [1, 3, 7])
def test_replication_fires_exactly_when_popularity_passes_the_threshold(
    name: str, threshold: int
) -> None:
    ds = build_grid_scheduler(name, threshold=threshold)
    assert isinstance(ds, DatasetScheduler)
    view = FakeView([0, 3, 1, 2, 5, 4])
    fired = [ds.on_access(0, 9, view, FirstRng()) for _ in range(3 * (threshold + 1))]
    at = [i + 1 for i, target in enumerate(fired) if target is not None]
    assert at == [threshold + 1, 2 * (threshold + 1), 3 * (threshold + 1)]
    assert ds.popularity(0, 9) == 0
    assert ds.on_access(1, 9, view, FirstRng()) is None  # popularity is per site
    if name == DATA_LEAST_LOADED:
        assert fired[threshold] == 2  # the least loaded of the 5 nearest others


def test_no_replication_never_fires() -> None:
    ds = build_grid_scheduler(DATA_DO_NOTHING)
    assert isinstance(ds, DatasetScheduler)
    assert all(ds.on_access(0, 1, FakeView([0] * 4), FirstRng()) is None for _ in range(50))


def test_adaptive_sends_a_job_to_its_data_when_the_fetch_is_slow() -> None:
    ext = build_grid_scheduler(JOB_ADAPTIVE)
    assert isinstance(ext, ExternalScheduler)
    job = GridJob(0, 0, origin=3, dataset=1, size_bytes=1e9, compute_s=300.0)
    assert ext.choose(job, FakeView([2, 0, 0, 0], holders=(0,)), FirstRng()) == 0
    # The data's site is busy for longer than a fetch takes: bring the data to the job.
    assert ext.choose(job, FakeView([20, 0, 0, 0], holders=(0,)), FirstRng()) == 3


def test_parameters_are_checked_by_name() -> None:
    with pytest.raises(ParamError, match="threshold"):
        build_grid_scheduler(DATA_RANDOM, threshold=0)
    with pytest.raises(ParamError, match="neighbours"):
        build_grid_scheduler(JOB_LOCAL, neighbours=3)
    with pytest.raises(ValueError, match="unknown grid scheduler"):
        build_grid_scheduler("JobEverywhere")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"users": 13}, "users"),
        ({"jobs": 97}, "jobs"),
        ({"bandwidth_mb_s": 0.0}, "bandwidth_mb_s"),
        ({"local": "lifo"}, "local"),
        ({"tier1": 6}, "tier1"),
    ],
)
def test_bad_settings_name_their_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(GridError) as info:
        replace(SMALL, **changes).check()  # type: ignore[arg-type]
    assert info.value.field == field


def test_the_tree_has_its_tiers_and_paths_meet_at_a_common_ancestor() -> None:
    tree = TierTree(30, 5, 1e6)
    assert tree.depth.count(0) == 1
    assert tree.depth.count(1) == 5
    assert tree.depth.count(2) == 24
    assert tree.hops(6, 11) == 2  # two tier-2 sites under the same tier-1 site
    assert tree.hops(6, 7) == 4  # under different tier-1 sites: through tier 0
    assert tree.path(6, 7) == tuple(reversed(tree.path(7, 6)))
    assert layout(GridConfig()).user_site.count(0) == 4  # 120 users over 30 sites


class _ScanLeastLoaded(ExternalScheduler):
    """JobLeastLoaded as it was: a pass over every site's queue at each job. Beside the
    indexed one, it checks at every choice that the view's index gives the same sites."""

    name = "scan-least-loaded"
    checked = 0

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        sites = range(view.n_sites)
        low = min(view.waiting(s) for s in sites)
        best = [s for s in sites if view.waiting(s) == low]
        assert list(view.least_waiting()) == best
        self.checked += 1
        return best[rng.randrange(len(best))]


@pytest.mark.parametrize("local", ["fifo", "data-ready", "farm"])
def test_the_least_loaded_index_is_the_scan(local: str) -> None:
    """The sites with the fewest waiting jobs, kept as queues change, are those a pass over
    the grid finds at every choice, and JobLeastLoaded sends every job where the pass sends
    it; with sites' own queues and with a cluster policy at each site (its core queue)."""
    cfg = replace(SMALL, local=local, users=24, jobs=240)
    scan = _ScanLeastLoaded()
    data = build_grid_scheduler(DATA_LEAST_LOADED, threshold=2)
    assert isinstance(data, DatasetScheduler)
    by_scan = GridSim(cfg, scan, data)
    by_scan.run()
    assert scan.checked == cfg.jobs
    assert len(set(by_scan.site_of)) > 1
    indexed = simulate(cfg, JOB_LEAST_LOADED, DATA_LEAST_LOADED)
    assert indexed.site_of == by_scan.site_of
    assert indexed.ended == by_scan.ended


class _CheckedGrid(GridSim):
    """The grid checking, at every ask, that the indexed answers are a pass's, and answering
    the pass's: the estimate of a fetch under way (a pass over every transfer in flight) and
    every other site less the holders (a filtered copy of the site's neighbours)."""

    fetches = 0
    spares = 0

    def fetch_estimate_s(self, dataset: int, site: int) -> float:
        got = super().fetch_estimate_s(dataset, site)
        if dataset in self.sites[site].present:
            return got
        for t in self.net.transfers.values():
            tag = t.tag
            if getattr(tag, "dataset", -1) == dataset and getattr(tag, "to", -1) == site:
                assert got == t.eta() - self.now
                self.fetches += 1
                return t.eta() - self.now
        return got

    def neighbours(self, site: int, k: int, without: Sequence[int] = ()) -> Sequence[int]:
        got = super().neighbours(site, k, without)
        near = super().neighbours(site, k)
        want = [s for s in near if s not in set(without)]
        assert len(got) == len(want)
        assert list(got) == want
        assert [got[i] for i in range(-len(want), 0)] == want
        self.spares += bool(without)
        return want


@pytest.mark.parametrize("dataset", [DATA_RANDOM, DATA_LEAST_LOADED])
def test_fetch_estimates_and_replica_sites_from_the_indices_are_the_passes(dataset: str) -> None:
    """JobAdaptive on a slow grid (fetches overlap) with replication at every second use:
    every estimate of a fetch under way and every list of sites a replica may go to are what
    a pass over the transfers in flight and over the sites gives, and the runs are the same
    as with the passes."""
    cfg = replace(SMALL, users=24, jobs=240, bandwidth_mb_s=2.0)
    ext = build_grid_scheduler(JOB_ADAPTIVE)
    ds = build_grid_scheduler(dataset, threshold=2, neighbours=0)
    assert isinstance(ext, ExternalScheduler)
    assert isinstance(ds, DatasetScheduler)
    checked = _CheckedGrid(cfg, ext, ds)
    checked.run()
    assert checked.fetches > 0
    assert checked.spares > 0
    assert checked.replicas > 0
    ds = build_grid_scheduler(dataset, threshold=2, neighbours=0)
    assert isinstance(ds, DatasetScheduler)
    plain = GridSim(cfg, ext, ds)
    plain.run()
    assert plain.site_of == checked.site_of
    assert plain.ended == checked.ended


def test_every_other_site_less_a_few_is_read_in_place() -> None:
    """The sites a replica may go to out of every other site: the right ones in order, by
    any index, without a copy; out-of-range indices refused."""
    ds = build_grid_scheduler(DATA_DO_NOTHING)
    assert isinstance(ds, DatasetScheduler)
    sim = GridSim(SMALL, JobLocalForTest(), ds)
    for site in range(SMALL.sites):
        near = list(sim.neighbours(site, 0))
        for without in ([], [site], [near[0]], [near[-1], site, near[2]], near):
            got = sim.neighbours(site, 0, without)
            want = [s for s in near if s not in without]
            assert list(got) == want
            assert list(got[1:3]) == want[1:3]
            with pytest.raises(IndexError):
                got[len(want)]
            with pytest.raises(IndexError):
                got[-len(want) - 1]
    tree = TierTree(30, 5, 1e6)
    assert all(tree.hops(a, b) == len(tree.path(a, b)) for a in range(30) for b in range(30))


class JobLocalForTest(ExternalScheduler):
    name = "local-for-test"

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        return job.origin
