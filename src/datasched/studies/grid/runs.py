"""The experiments of ranganathan-foster §5.2 as runs of the grid simulator: the 12 pairs of
external and dataset schedulers (and JobAdaptive with each dataset scheduler) at both
bandwidths and every seed, and a sensitivity table over the settings the paper leaves open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from datasched.gridsim.engine import GridResult, GridRun
from datasched.gridsim.model import GridConfig
from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    DATA_LEAST_LOADED,
    DATA_RANDOM,
    JOB_ADAPTIVE,
    JOB_DATA_PRESENT,
    JOB_LEAST_LOADED,
    JOB_LOCAL,
    JOB_RANDOM,
)

__all__ = [
    "BASE",
    "DATASET_SCHEDULERS",
    "EXTERNAL_SCHEDULERS",
    "FULL",
    "QUICK",
    "THRESHOLD",
    "GridStudy",
    "Summary",
    "pairs_at",
    "study_runs",
    "summarise",
    "variant_pairs",
]

EXTERNAL_SCHEDULERS = (JOB_RANDOM, JOB_LEAST_LOADED, JOB_DATA_PRESENT, JOB_LOCAL)
DATASET_SCHEDULERS = (DATA_DO_NOTHING, DATA_RANDOM, DATA_LEAST_LOADED)
BASE = GridConfig()
THRESHOLD = 5
"""Jobs at a site that make a dataset popular there: ours (the paper gives none)."""

PAIRS = "pairs"
SENSITIVITY = "sensitivity"


@dataclass(frozen=True, slots=True)
class GridStudy:
    """How much of the experiment to run."""

    seeds: tuple[int, ...]
    jobs: int
    bandwidths_mb_s: tuple[float, ...] = (10.0, 100.0)
    sensitivity: bool = True
    adaptive: bool = True
    local: str = BASE.local
    """Every site's local scheduler (``GridConfig.local``) in every run but the sensitivity
    rows that change it."""


FULL = GridStudy(seeds=(0, 1, 2), jobs=6000)
QUICK = GridStudy(seeds=(0,), jobs=1800, sensitivity=False)

VARIANTS: tuple[tuple[str, dict[str, object], int], ...] = (
    ("ours (the grid above)", {}, THRESHOLD),
    ("4-8 processors per site", {"procs": (4, 8)}, THRESHOLD),
    ("5 GB of cache per site", {"cache_gb": 5.0}, THRESHOLD),
    ("40 GB of cache per site", {"cache_gb": 40.0}, THRESHOLD),
    ("2 sites in tier 1 (deeper tree)", {"tier1": 2}, THRESHOLD),
    ("29 sites in tier 1 (a star)", {"tier1": 29}, THRESHOLD),
    ("threshold 2 jobs", {}, 2),
    ("threshold 20 jobs", {}, 20),
    ("geometric p = 0.2 (hotter datasets)", {"popularity_p": 0.2}, THRESHOLD),
    ("each user ranks datasets alone", {"shared_ranking": 0.0}, THRESHOLD),
    ("data-ready local scheduler (first landed job)", {"local": "data-ready"}, THRESHOLD),
    ("sites run out-of-order with node caches", {"local": "out-of-order"}, THRESHOLD),
)
"""The sensitivity table: one setting changed at a time from ours (the first row, run again on
its own so every row has the same seed), at 10 MB/s, on the first seed."""


def study_runs(study: GridStudy) -> list[GridRun]:
    """Every run of ``study``: the pairs (and JobAdaptive) at each bandwidth and seed, then
    the sensitivity variants (each external scheduler without replication and with
    DataLeastLoaded)."""
    ext = (*EXTERNAL_SCHEDULERS, JOB_ADAPTIVE) if study.adaptive else EXTERNAL_SCHEDULERS
    runs = []
    for bw in study.bandwidths_mb_s:
        for seed in study.seeds:
            cfg = replace(BASE, jobs=study.jobs, bandwidth_mb_s=bw, seed=seed, local=study.local)
            for e in ext:
                for d in DATASET_SCHEDULERS:
                    runs.append(GridRun(cfg, e, d, THRESHOLD, PAIRS))
    if study.sensitivity:
        for label, changes, threshold in VARIANTS:
            base = replace(BASE, jobs=study.jobs, seed=study.seeds[0], local=study.local)
            cfg = replace(base, **changes)  # type: ignore[arg-type]
            for e in EXTERNAL_SCHEDULERS:
                for d in (DATA_DO_NOTHING, DATA_LEAST_LOADED):
                    runs.append(GridRun(cfg, e, d, threshold, f"{SENSITIVITY}: {label}"))
    return runs


@dataclass(frozen=True, slots=True)
class Summary:
    """One pair at one bandwidth, averaged over the seeds (as the paper's figures are)."""

    label: str
    bandwidth_mb_s: float
    external: str
    dataset: str
    seeds: int
    response_s: float
    mb_per_job: float
    idle_pct: float
    replicas: float
    lan_mb_per_job: float = 0.0
    """MB read over the sites' LANs per job (a cluster policy at the sites; else 0)."""

    @property
    def pair(self) -> str:
        return f"{self.external} + {self.dataset}"


def summarise(results: Sequence[GridResult]) -> list[Summary]:
    """The mean over seeds of each (label, bandwidth, external, dataset)."""
    groups: dict[tuple[str, float, str, str], list[GridResult]] = {}
    for r in results:
        key = (r.run.label, r.run.cfg.bandwidth_mb_s, r.run.external, r.run.dataset)
        groups.setdefault(key, []).append(r)
    out = []
    for (label, bw, e, d), rs in groups.items():
        n = len(rs)
        out.append(
            Summary(
                label,
                bw,
                e,
                d,
                n,
                sum(r.mean_response_s for r in rs) / n,
                sum(r.mb_per_job for r in rs) / n,
                sum(r.idle_pct for r in rs) / n,
                sum(r.replicas for r in rs) / n,
                sum(r.lan_mb_per_job for r in rs) / n,
            )
        )
    return out


def pairs_at(summaries: Sequence[Summary], bw: float) -> dict[tuple[str, str], Summary]:
    """The main experiment's pairs at bandwidth ``bw``, by (external, dataset)."""
    return {
        (s.external, s.dataset): s for s in summaries if s.label == PAIRS and s.bandwidth_mb_s == bw
    }


def variant_pairs(summaries: Sequence[Summary]) -> list[tuple[str, dict[tuple[str, str], Summary]]]:
    """The sensitivity table's variants in order, each with its pairs (the first is ours)."""
    out = []
    for label, _, _ in VARIANTS:
        got = {
            (s.external, s.dataset): s for s in summaries if s.label == f"{SENSITIVITY}: {label}"
        }
        if got:
            out.append((label, got))
    return out
