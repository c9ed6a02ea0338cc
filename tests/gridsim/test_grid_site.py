"""Grid sites whose local scheduler is a registered cluster policy: every policy of
the registry, the day it is added, completes every job on a small grid, computes every event
of each job exactly once, keeps a user's jobs in sequence and a job's data at its site while
any part computes, and gives one result per seed. The paper's default (FIFO, no node caches)
gives what it gave before sites could run a cluster policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from datasched.core.intervals import IntervalSet
from datasched.gridsim.engine import GridRun, GridSim, run_grid
from datasched.gridsim.model import GridConfig, GridError
from datasched.gridsim.site import grid_data_space
from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    DATA_LEAST_LOADED,
    DATA_RANDOM,
    JOB_ADAPTIVE,
    JOB_DATA_PRESENT,
    JOB_LOCAL,
    JOB_RANDOM,
    DatasetScheduler,
    ExternalScheduler,
    build_grid_scheduler,
)
from datasched.policies.registry import available

TINY = GridConfig(users=8, sites=4, datasets=12, jobs=48, tier1=2, cache_gb=3.0)
POLICIES = sorted(available())


def simulate(cfg: GridConfig, external: str, dataset: str) -> GridSim:
    ext = build_grid_scheduler(external)
    ds = build_grid_scheduler(dataset, **({} if dataset == DATA_DO_NOTHING else {"threshold": 2}))
    assert isinstance(ext, ExternalScheduler)
    assert isinstance(ds, DatasetScheduler)
    sim = GridSim(cfg, ext, ds, check_conservation=True)
    sim.run()
    return sim


@pytest.mark.parametrize("policy", POLICIES)
def test_every_cluster_policy_runs_a_grid_site(policy: str) -> None:
    """Replay the trace and the sites' records: every job starts once and ends once, at a
    site holding its dataset from its first part's start to its end (no eviction between);
    a user submits the next job at the previous one's end; every event of each job's
    dataset was computed exactly once, by that job's parts."""
    cfg = replace(TINY, local=policy, bandwidth_mb_s=20.0)
    sim = simulate(cfg, JOB_RANDOM, DATA_LEAST_LOADED)
    assert sim.core is not None
    present = {(site, d) for d, site in enumerate(sim.grid.home)}
    out: dict[int, int] = {}
    last_end: dict[int, float] = {}
    running: dict[int, tuple[int, int]] = {}  # job -> (site, dataset) from start to end
    ended: set[int] = set()
    for time, what, job, site, d in sim.trace:
        if what == "landed":
            present.add((site, d))
        elif what == "evict":
            assert (site, d) not in running.values(), f"dataset {d} left site {site} in use"
            present.discard((site, d))
        elif what == "submit":
            user = sim.jobs[job].user
            assert user not in out
            assert time == last_end.get(user, 0.0)
            out[user] = job
        elif what == "start":
            assert (site, d) in present, f"job {job} computed at site {site} without {d}"
            assert job not in running
            assert job not in ended
            running[job] = (site, d)
        elif what == "end":
            assert running.pop(job) == (site, d)
            ended.add(job)
            user = sim.jobs[job].user
            assert out.pop(user) == job
            last_end[user] = time
    assert len(ended) == cfg.jobs == len(sim.jobs)
    assert not out
    assert not running
    for grid_job, site in zip(sim.jobs, sim.site_of, strict=True):
        pieces = sim.core.engines[site].processed(grid_job.job_id)
        want = sim.core.events_of(grid_job.dataset)
        assert sum(p.length for p in pieces) == want.length, f"job {grid_job.job_id}"
        got = IntervalSet()
        for p in pieces:
            got = got | p
        assert got == want, f"job {grid_job.job_id}: computed {got}, not {want}"
    result = run_grid(GridRun(cfg, JOB_RANDOM, DATA_LEAST_LOADED, 2))
    assert result == run_grid(GridRun(cfg, JOB_RANDOM, DATA_LEAST_LOADED, 2))
    assert result.lan_mb_per_job > 0  # the node caches start empty: something crossed a LAN


@pytest.mark.parametrize(
    ("local", "external", "dataset", "expected"),
    [
        # From the engine before sites could run a cluster policy (data-ready was called
        # out-of-order then): response (s), MB/job, idle (%), makespan (s), replicas, evictions.
        ("fifo", JOB_RANDOM, DATA_DO_NOTHING, (832.7042918601211, 993.7765128608654,
                                               74.47798989210843, 7479.725308972009, 0, 62)),
        ("fifo", JOB_DATA_PRESENT, DATA_LEAST_LOADED, (495.32457539168564, 102.06983580933733,
                                                       61.25477988393912, 4792.107035250729, 8, 4)),
        ("fifo", JOB_ADAPTIVE, DATA_LEAST_LOADED, (413.118735773108, 223.36933253584434,
                                                   51.3020038960692, 3882.686237459693, 6, 7)),
        ("data-ready", JOB_LOCAL, DATA_RANDOM, (738.4655054168966, 1047.6613698978044,
                                                71.3921293454091, 6605.7989432713875, 0, 64)),
    ],
)  # fmt: skip
def test_the_grids_own_local_schedulers_give_what_they_gave(
    local: str, external: str, dataset: str, expected: tuple[float, ...]
) -> None:
    cfg = GridConfig(users=12, sites=6, datasets=20, jobs=96, tier1=2, cache_gb=3.0, local=local)
    r = run_grid(GridRun(cfg, external, dataset, 5))
    got = (r.mean_response_s, r.mb_per_job, r.idle_pct, r.makespan_s, r.replicas, r.evictions)
    assert got == expected
    assert r.lan_mb_per_job == 0.0


def test_a_dataset_is_one_file_of_events_of_one_size() -> None:
    space = grid_data_space([0.5e9, 1.2345e9, 2e9], events_per_gb=1000)
    assert [f.n_events for f in space.files] == [500, 1234, 2000]
    assert space.uniform_bytes_per_event == 1e6
    assert [f.start for f in space.files] == [0, 500, 1734]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"local": "no-such-policy"}, "local"),
        ({"local": "fifo", "local_params": (("x", 1),)}, "local_params"),
        ({"local": POLICIES[0], "local_params": (("no_such_param", 1),)}, "local_params"),
        ({"local": POLICIES[0], "lan_mb_s": 0.0}, "lan_mb_s"),
        ({"local": POLICIES[0], "node_cache_gb": -1.0}, "node_cache_gb"),
        ({"local": POLICIES[0], "events_per_gb": 0}, "events_per_gb"),
    ],
)
def test_bad_local_settings_name_their_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(GridError) as info:
        replace(TINY, **changes).check()  # type: ignore[arg-type]
    assert info.value.field == field
    if field == "local":
        assert "fifo" in info.value.reason
        assert POLICIES[0] in info.value.reason
