"""The measurements behind the claims of ponce-hersch: our numbers, nothing else.

Every run uses the defaults of :class:`~datasched.sim.experiment.SimConfig` (the paper's
parameters, §2.4); nothing is fitted. Each function returns, per claim key of
:mod:`datasched.studies.ponce.claims`, our value and the numbers its note quotes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from datasched.core.model import Pipelining
from datasched.core.policy import metrics_of
from datasched.policies import build_policy
from datasched.sim.engine import SimRun
from datasched.sim.experiment import SimConfig, find_max_load, simulate
from datasched.sim.workload import expected_single_node_time_s, theoretical_max_load_jobs_per_h
from datasched.studies.claims import Measured
from datasched.studies.ponce.figures import (
    MAX_LOAD_CONFIRM,
    QUICK_PERIODS_PER_RUN,
    SEARCH_RUNS,
    Unit,
    cost_of,
    search_first,
)
from datasched.studies.ponce.perfmap import PERIODS_PER_RUN, jobs_for_period

__all__ = [
    "LOW_LOAD",
    "MAX_LOAD_POLICIES",
    "PIPELINING_GAIN_LOADS",
    "Progress",
    "fcfs_measured",
    "fcfs_units",
    "max_load_probe",
    "measure_fcfs",
    "measure_policies",
    "policy_max_load",
]

Progress = Callable[[str], None]

LOW_LOAD = 0.05
"""Jobs per hour: the paper's "low load" (a job rarely meets another one)."""

MAX_LOAD_POLICIES = ("cache-splitting", "out-of-order", "adaptive-delay")
"""The policies whose maximal load (100 GB caches) the claims of §4-§6 need."""

PIPELINING_GAIN_LOADS = (0.5, 0.9)
"""Jobs per hour: the loads at which §7.1 reads job splitting's gain from pipelining
(claims ``splitting_pipelining_gain_<load>``)."""


def _decompose(
    run: SimRun, measure: tuple[int, int], reference_s_per_event: float
) -> tuple[float, float]:
    """Mean per-job caching factor and parallelism of the measured jobs.

    A job's speedup is exactly their product: ``n * 0.8 / busy`` (time per event saved by
    caches) times ``busy / processing`` (nodes it held on average).
    """
    lo, hi = measure
    recs = [r for r in sorted(run.jobs, key=lambda r: r.submit_s)[lo:hi] if r.end_s >= 0]
    caching = [r.n_events * reference_s_per_event / r.busy_s for r in recs]
    parallel = [r.busy_s / (r.end_s - r.first_start_s) for r in recs]
    return sum(caching) / len(caching), sum(parallel) / len(parallel)


def _fcfs_configs(quick: bool) -> tuple[SimConfig, SimConfig, int]:
    """The FCFS claims' base run, their maximal-load probe and the cache runs' length."""
    n_jobs = 600 if quick else 2500
    n_cache_jobs = 900 if quick else 2500
    # Maximal loads need longer runs: near capacity a short run cannot tell a queue that
    # grows from one that fluctuates (farm and splitting runs are cheap).
    n_max_load_jobs = 2000 if quick else 4000
    base = SimConfig(n_jobs=n_jobs)
    return base, replace(base, n_jobs=n_max_load_jobs), n_cache_jobs


def _max_load_of(
    probe: SimConfig, policy: str, pipelining: Pipelining, first: float | None = None
) -> float:
    return find_max_load(
        replace(probe, policy=policy, pipelining=pipelining),
        first=first,
        confirm_factor=MAX_LOAD_CONFIRM,
    )


def _speedup_of(base: SimConfig, policy: str, pipelining: Pipelining) -> float:
    config = replace(base, policy=policy, load_jobs_per_h=LOW_LOAD, pipelining=pipelining)
    return simulate(config)[0].mean_speedup


def _cache_splitting_low_load(base: SimConfig, cache_gb: float, n_jobs: int) -> dict[str, float]:
    config = replace(
        base, policy="cache-splitting", cache_gb=cache_gb, load_jobs_per_h=LOW_LOAD, n_jobs=n_jobs
    )
    s, run = simulate(config)
    factor, parallelism = _decompose(run, config.measure(n_jobs), base.reference_s_per_event)
    return {
        "speedup": s.mean_speedup,
        "factor": factor,
        "hit_ratio": s.cache_hit_ratio,
        "parallelism": parallelism,
    }


FCFS_CACHES_GB = (50.0, 100.0, 200.0)


def fcfs_units(*, quick: bool = False) -> list[Unit]:
    """The independent runs behind the claims of §3.4 and §7.1 (:func:`fcfs_measured` makes
    the claims' numbers of their results, in this order)."""
    base, probe, n_cache_jobs = _fcfs_configs(quick)
    none, tert = Pipelining.NONE, Pipelining.TERTIARY
    first = search_first(quick=quick)
    units = [
        Unit(
            "fcfs/farm-max-load",
            "processing farm: maximal sustainable load",
            partial(_max_load_of, probe, "farm", none, first),
            cost_of(replace(probe, policy="farm"), runs=SEARCH_RUNS),
        ),
        Unit(
            "fcfs/farm-pipelined",
            "processing farm with tertiary pipelining",
            partial(_speedup_of, base, "farm", tert),
            cost_of(replace(base, policy="farm")),
        ),
        Unit(
            "fcfs/splitting",
            "job splitting at low load",
            partial(_speedup_of, base, "splitting", none),
            cost_of(replace(base, policy="splitting")),
        ),
        Unit(
            "fcfs/splitting-pipelined",
            "job splitting at low load, tertiary pipelining",
            partial(_speedup_of, base, "splitting", tert),
            cost_of(replace(base, policy="splitting")),
        ),
        Unit(
            "fcfs/splitting-max-load",
            "job splitting: maximal sustainable load",
            partial(_max_load_of, probe, "splitting", none, first),
            cost_of(replace(probe, policy="splitting"), runs=SEARCH_RUNS),
        ),
        Unit(
            "fcfs/splitting-pipelined-max-load",
            "job splitting with pipelining: maximal sustainable load",
            partial(_max_load_of, probe, "splitting", tert, first),
            cost_of(replace(probe, policy="splitting"), runs=SEARCH_RUNS),
        ),
    ]
    units += [
        Unit(
            f"fcfs/cache-splitting-{cache_gb:g}gb",
            f"cache-oriented splitting at low load, {cache_gb:.0f} GB caches",
            partial(_cache_splitting_low_load, base, cache_gb, n_cache_jobs),
            cost_of(replace(base, policy="cache-splitting", n_jobs=n_cache_jobs)),
        )
        for cache_gb in FCFS_CACHES_GB
    ]
    return units


def fcfs_measured(results: Sequence[Any], *, quick: bool = False) -> dict[str, Measured]:
    """Our numbers for the claims of §3.4 and §7.1 from the results of :func:`fcfs_units`."""
    base, _, _ = _fcfs_configs(quick)
    farm_max, farm_pipe, split, split_pipe, split_max, split_pipe_max, *caches = results
    reference = base.reference_s_per_event
    out: dict[str, Measured] = {}
    out["single_node_time_s"] = Measured(expected_single_node_time_s())
    out["theoretical_max_load"] = Measured(theoretical_max_load_jobs_per_h())
    capacity = 3600 * base.n_nodes / (base.mean_job_events * reference)
    out["farm_max_load"] = Measured(farm_max, {"capacity": capacity})
    out["farm_pipelined_speedup"] = Measured(farm_pipe)
    out["splitting_low_load_speedup"] = Measured(split)
    out["splitting_pipelined_low_load_speedup"] = Measured(split_pipe)
    out["splitting_max_load"] = Measured(split_max, {"capacity": capacity})
    pipe_capacity = capacity * reference / 0.6
    out["splitting_pipelined_max_load"] = Measured(split_pipe_max, {"capacity": pipe_capacity})
    by_cache = dict(zip(FCFS_CACHES_GB, caches, strict=True))
    gains = {c: r["speedup"] - split for c, r in by_cache.items()}
    top = by_cache[200.0]
    out["cache_splitting_200gb_low_load_speedup"] = Measured(
        top["speedup"],
        {"factor": top["factor"], "hit_ratio": top["hit_ratio"], "parallelism": top["parallelism"]},
    )
    out["cache_gain_100_over_50"] = Measured(gains[100.0] / gains[50.0])
    out["cache_gain_200_over_100"] = Measured(gains[200.0] / gains[100.0])
    return out


def measure_fcfs(*, quick: bool = False, progress: Progress | None = None) -> dict[str, Measured]:
    """Our numbers for the claims of ponce-hersch §3.4 and §7.1 about the FCFS policies.

    ``quick`` uses fewer jobs per run (statistics get noisier, the cache-oriented runs see a
    shorter warm-up).
    """
    say = progress or (lambda _: None)
    results = []
    for unit in fcfs_units(quick=quick):
        say(unit.label)
        results.append(unit.run())
    return fcfs_measured(results, quick=quick)


def _rows(fig: Any, series: str, *, ok: bool = True) -> list[dict[str, Any]]:
    """A figure's rows of one series (only the non-overloaded ones with ``ok``), by load."""
    rows = [r for r in fig.rows if r["series"] == series and not (ok and r["overloaded"])]
    return sorted(rows, key=lambda r: r["load_jobs_per_h"])


def _at_common_load(
    fig: Any, a: str, b: str, *, highest: bool
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Rows of series ``a`` and ``b`` at their lowest (or highest) load neither overloads."""
    ra = {r["load_jobs_per_h"]: r for r in _rows(fig, a)}
    rb = {r["load_jobs_per_h"]: r for r in _rows(fig, b)}
    common = sorted(set(ra) & set(rb))
    if not common:
        return None
    load = common[-1] if highest else common[0]
    return ra[load], rb[load]


def _probe(quick: bool) -> SimConfig:
    return SimConfig(n_jobs=1000 if quick else 2000)


def max_load_probe(policy: str, *, quick: bool = False) -> SimConfig:
    """The runs of :func:`policy_max_load`'s search (at a load the search sets)."""
    probe = _probe(quick)
    delay_h = metrics_of(build_policy(policy)).max_delay_s() / 3600
    if delay_h > 0:
        # Its runs at high load let jobs go in batches of up to its longest period (the
        # map's, for adaptive delay): they must span as many periods as the map's own runs
        # for overload to show (with --quick, as many as the quick figures' delayed runs).
        periods = QUICK_PERIODS_PER_RUN if quick else PERIODS_PER_RUN
        probe = replace(probe, n_jobs=jobs_for_period(probe.n_jobs, delay_h, periods=periods))
    return replace(probe, policy=policy)


def policy_max_load(policy: str, *, quick: bool = False) -> float:
    """The maximal load of ``policy`` with 100 GB caches, as :func:`measure_policies`
    searches it (a separate function so that the searches can run in other processes)."""
    return find_max_load(
        max_load_probe(policy, quick=quick),
        first=search_first(quick=quick),
        confirm_factor=MAX_LOAD_CONFIRM,
    )


def measure_policies(
    figs: dict[str, Any],
    *,
    quick: bool = False,
    progress: Progress | None = None,
    max_loads: dict[str, float] | None = None,
) -> dict[str, Measured]:
    """Our numbers for the claims of ponce-hersch §4-§7 (out-of-order, replication, delayed
    and adaptive delay, pipelining), read from the figures' runs plus a few maximal-load
    searches (taken from ``max_loads``, policy -> jobs/h, where it has them). A claim whose
    figure lacks the points it needs is left out."""
    say = progress or (lambda _: None)
    probe = _probe(quick)
    out: dict[str, Measured] = {}
    nan = float("nan")
    known = dict(max_loads or {})

    def max_load(policy: str) -> float:
        if policy not in known:
            say(f"maximal load: {policy}, 100 GB")
            known[policy] = policy_max_load(policy, quick=quick)
        return known[policy]

    cs_max = max_load("cache-splitting")
    ooo_max = max_load("out-of-order")
    out["ooo_over_cs_max_load"] = Measured(
        ooo_max / cs_max if cs_max else nan, {"ooo_max": ooo_max, "cs_max": cs_max}
    )
    pair = _at_common_load(
        figs["fig04"], "cache-oriented splitting 100 GB", "out-of-order 100 GB", highest=True
    )
    if pair is not None:
        cs, ooo = pair
        out["ooo_wait_ratio"] = Measured(
            cs["mean_wait_h"] / max(ooo["mean_wait_h"], 1e-6),
            {
                "load": cs["load_jobs_per_h"],
                "ooo_speedup": ooo["mean_speedup"],
                "cs_speedup": cs["mean_speedup"],
            },
        )
    fig5 = figs["fig05"]
    waits = [r["wait_h"] for r in fig5.rows]
    if waits:
        n = fig5.meta.get("jobs", 0)
        out["ooo_worst_wait_days"] = Measured(
            max(waits) / 24,
            {"load": fig5.rows[0]["load_jobs_per_h"], "max_load": fig5.meta.get("max_load", nan)},
        )
        out["ooo_fairness_rate"] = Measured(100 * fig5.meta.get("fairness_fired", 0) / max(n, 1))
    fig6 = figs["fig06"]
    without = {r["load_jobs_per_h"]: r for r in _rows(fig6, "without replication")}
    with_ = {r["load_jobs_per_h"]: r for r in _rows(fig6, "with replication")}
    common = sorted(set(without) & set(with_))
    if common:
        ratios = [with_[x]["mean_speedup"] / without[x]["mean_speedup"] for x in common]
        top = with_[common[-1]]
        out["replication_speedup_ratio"] = Measured(
            sum(ratios) / len(ratios),
            {"n_loads": len(common), "low": min(ratios), "high": max(ratios)},
        )
        out["replication_rate"] = Measured(
            100 * top.get("replicated_jobs", 0) / max(top["jobs"], 1),
            {"load": top["load_jobs_per_h"], "replications": top.get("replications", 0)},
        )
    fig9 = figs["fig09"]
    pts = {(r["period_h"], r["stripe_events"], r["cache_gb"]): r for r in fig9.rows}
    week = pts.get((168.0, 200, 200.0))
    if week is not None:
        out["delayed_week_200gb_stripe200"] = Measured(week["max_load_jobs_per_h"])
    curve = sorted(
        (p, r["max_load_jobs_per_h"]) for (p, st, c), r in pts.items() if st == 5000 and c == 100.0
    )
    if len(curve) >= 3:
        out["delayed_linear_in_period"] = Measured(_r_squared(curve), {"curve": curve})
    small, large = pts.get((48.0, 200, 100.0)), pts.get((48.0, 5000, 100.0))
    if small is not None and large is not None:
        out["delayed_smaller_stripes_more_load"] = Measured(
            small["max_load_jobs_per_h"] / large["max_load_jobs_per_h"]
        )
    pair = _at_common_load(figs["fig07"], "delayed 48 h", "out-of-order", highest=False)
    if pair is not None:
        d, o = pair
        out["delayed_speedup_below_ooo"] = Measured(
            d["mean_speedup"] / o["mean_speedup"],
            {"delayed_wait_h": d["mean_wait_h"], "ooo_wait_h": o["mean_wait_h"]},
        )
    pair = _at_common_load(
        figs["fig10"], "adaptive delay, stripe 200", "out-of-order", highest=False
    )
    if pair is not None:
        a, o = pair
        out["adaptive_low_load_speedup"] = Measured(
            a["mean_speedup"] / o["mean_speedup"], {"load": a["load_jobs_per_h"]}
        )
        out["adaptive_low_load_extra_wait"] = Measured(a["mean_wait_h"] - o["mean_wait_h"])
    adaptive_max = max_load("adaptive-delay")
    longest = max((p for p, _ in curve), default=nan)
    delayed_best = dict(curve).get(longest, nan)
    out["adaptive_sustains_delayed_loads"] = Measured(
        adaptive_max / delayed_best,
        {"adaptive_max": adaptive_max, "delayed_best": delayed_best, "period": longest},
    )
    say("job splitting with and without pipelining at higher loads")
    for load in PIPELINING_GAIN_LOADS:
        plain, _ = simulate(replace(probe, policy="splitting", load_jobs_per_h=load))
        piped, _ = simulate(
            replace(probe, policy="splitting", load_jobs_per_h=load, pipelining=Pipelining.TERTIARY)
        )
        out[f"splitting_pipelining_gain_{load:g}"] = Measured(
            piped.mean_speedup / plain.mean_speedup
        )
    gains = {}
    for c in (50, 100, 200):
        pair = _at_common_load(
            figs["fig12"], f"out-of-order {c} GB", f"out-of-order {c} GB, pipelined", highest=False
        )
        if pair is not None:
            gains[c] = pair[1]["mean_speedup"] / pair[0]["mean_speedup"]
    if 50 in gains and 200 in gains:
        out["ooo_pipelining_gain_shrinks"] = Measured(
            gains[50] / gains[200], {"gains": list(gains.items())}
        )
    pair = _at_common_load(
        figs["fig15"], "out-of-order 100 GB, none", "out-of-order 100 GB, both", highest=False
    )
    if pair is not None:
        out["ooo_both_pipelining_gain"] = Measured(
            pair[1]["mean_speedup"] / pair[0]["mean_speedup"]
        )
    return out


def _r_squared(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    if sxx == 0 or syy == 0:
        return 1.0
    return sxy * sxy / (sxx * syy)
