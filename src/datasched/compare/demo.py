"""``datasched demo``: the runtime's tour on a synthetic dataset.

A workload of overlapping jobs (as many physicists reading the same hot segments) runs three
times on the same cluster with cold caches each time: under processing-farm scheduling, under
a cache-aware policy, and as a plain Dask map of the same packets through the same worker
caches with placement left to Dask. The simulator, given the same jobs, cluster and calibrated
costs, predicts each policy's makespan beside the measured one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from datasched._files import atomic_write_text
from datasched.compare.predict import predict_makespan
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.outputs import merge
from datasched.runtime.reports import EngineConfig, ProgressSink, RunReport
from datasched.runtime.session import (
    Calibration,
    ClusterOptions,
    job_space,
    run_dask_map,
    run_jobs,
)

__all__ = ["DemoResult", "demo_workload", "run_demo"]

DEMO_EVENTS = 200_000
DEMO_FILES = 100
WINDOW_FRACTION = 0.3
"""Each demo job reads 30 % of the dataset (30 of the 100 files)."""
FIRST_FRACTIONS = (0.0, 0.1, 0.2, 0.05, 0.15, 0.0, 0.1, 0.25, 0.05, 0.2, 0.15, 0.0)
"""Where the jobs' windows start: overlapping, like analyses of the same hot segments."""
DEMO_JOBS = 16
SUBMIT_EVERY_S = 0.25
"""A burst of jobs: one every quarter second, each taking seconds alone."""
CACHE_FRACTION = 0.25
"""Each worker caches a quarter of the dataset: less than one job, all of it across four."""
DEMO_POLICY_PARAMS: dict[str, dict[str, Any]] = {"out-of-order": {"replication": True}}
"""The demo's workers share one machine, so out-of-order reads what a peer caches from the
peer's disk (ponce-hersch §4.2) instead of fetching it again from tertiary storage: without
it, work stolen from a busy node re-reads that node's hot files from tape."""


@dataclass(slots=True)
class DemoResult:
    """The three runs and the simulator's predictions."""

    runs: dict[str, RunReport]
    baseline: RunReport
    predictions: dict[str, float]
    plot: Path
    notes: list[str] = field(default_factory=list)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The parameters each policy ran with (shown beside its name)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "policies": {name: r.summary() for name, r in self.runs.items()},
            "dask_baseline": self.baseline.summary(),
            "sim_prediction": {
                name: {"makespan_s": round(s, 3)} for name, s in self.predictions.items()
            },
            "scheduling_ms_per_packet": {
                name: round(r.scheduling_ms_per_packet, 4) for name, r in self.runs.items()
            },
            "plot": str(self.plot),
        }

    def table(self) -> Table:
        table = Table(title="the same jobs, three ways (cold caches each time)")
        # Fits 80 columns (a log, a pipe): the run's parameters go on a line of their own.
        table.add_column("run")
        for col in ("makespan", "simulated", "events", "cache hits", "tertiary"):
            table.add_column(col, justify="right", no_wrap=True)
        rows = [*self.runs.items(), ("dask map", self.baseline)]
        for name, r in rows:
            predicted = self.predictions.get(name)
            params = self.params.get(name)
            label = (
                f"{name}\n({', '.join(f'{k}={v}' for k, v in params.items())})" if params else name
            )
            table.add_row(
                label,
                f"{r.makespan_s:.1f} s",
                f"{predicted:.1f} s" if predicted is not None else "-",
                f"{r.events_processed:,}"
                if r.events_processed == r.events_expected
                else f"{r.events_processed:,} of {r.events_expected:,}",
                f"{r.cache_hit_ratio:.0%}",
                f"{r.bytes_from_tertiary / 1e6:.1f} MB",
            )
        return table


def demo_workload(catalog: Path, out_dir: Path, n_jobs: int = DEMO_JOBS) -> Path:
    """Write the demo's jobs file (overlapping windows of the 'zmumu' dataset)."""
    doc = yaml.safe_load(catalog.read_text())
    files = doc["datasets"]["zmumu"]["files"]
    counts = [int(f["n_events"]) for f in files]
    offsets = [sum(counts[:i]) for i in range(len(counts) + 1)]
    window = max(1, round(WINDOW_FRACTION * len(counts)))
    jobs = []
    for k in range(n_jobs):
        first = round(FIRST_FRACTIONS[k % len(FIRST_FRACTIONS)] * len(counts))
        first = min(first, len(counts) - window)
        jobs.append(
            {
                "id": f"zpeak-{k + 1}",
                "dataset": "zmumu",
                "events": [offsets[first], offsets[first + window]],
                "output": f"results/zpeak-{k + 1}.pkl",
                "submit_s": SUBMIT_EVERY_S * k,
            }
        )
    spec = {
        "catalog": str(catalog.resolve()),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
        "jobs": jobs,
    }
    path = out_dir / "jobs.yaml"
    atomic_write_text(path, yaml.safe_dump(spec, sort_keys=False))
    return path


def run_demo(
    data_dir: Path,
    out_dir: Path,
    *,
    cache_policy: str = "out-of-order",
    policy_params: dict[str, Any] | None = None,
    workers: int = 4,
    tertiary_bytes_per_s: float = 0.25e6,
    progress_factory: Callable[[int], AbstractContextManager[ProgressSink]] | None = None,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """Create the dataset if absent, run the three variants, predict, plot.

    ``policy_params`` go to ``cache_policy`` (default: :data:`DEMO_POLICY_PARAMS`)."""
    from datasched.runtime.demodata import plot_mass, write_demo_dataset

    catalog = data_dir / "catalog.yaml"
    if not catalog.exists():
        if log is not None:
            log(f"writing the demo dataset to {data_dir} ...")
        catalog = write_demo_dataset(data_dir, n_events=DEMO_EVENTS, n_files=DEMO_FILES)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = load_jobs(demo_workload(catalog, out_dir))
    space = job_space(specs)
    total_bytes = space.n_bytes
    opts = ClusterOptions(
        workers=workers,
        cache_bytes=int(CACHE_FRACTION * total_bytes * 1.05),
        cache_root=out_dir / "caches",
        tertiary_bytes_per_s=tertiary_bytes_per_s,
    )
    calibration: Calibration | None = None  # measured on a worker by the first run
    config = EngineConfig(packet_target_s=0.5, min_packet_events=500)
    total = sum(s.n_events for s in specs)

    def bars() -> AbstractContextManager[Any]:
        return progress_factory(total) if progress_factory is not None else nullcontext(None)

    if policy_params is None:
        policy_params = DEMO_POLICY_PARAMS.get(cache_policy, {})
    runs: dict[str, RunReport] = {}
    predictions: dict[str, float] = {}
    for name in ("farm", cache_policy):
        params = policy_params if name == cache_policy else {}
        if log is not None:
            log(f"running under '{name}' ...")
        with bars() as sink:
            runs[name] = asyncio.run(
                run_jobs(
                    _with_outputs(specs, out_dir / name),
                    opts,
                    policy=name,
                    policy_params=params,
                    config=config,
                    progress=sink,
                    cold=True,
                    calibration=calibration,
                )
            )
        calibration = runs[name].calibration
        assert isinstance(calibration, Calibration)
        predictions[name] = predict_makespan(
            specs, opts, calibration, policy=name, policy_params=params
        )
    if log is not None:
        log("running as a plain Dask map ...")
    with bars() as sink:
        baseline = asyncio.run(
            run_dask_map(
                _with_outputs(specs, out_dir / "dask-map"),
                opts,
                # coffea's default chunk (100,000 events) is larger than a demo file: one
                # task per file a job reads.
                packet_events=100_000,
                progress=sink,
                cold=True,
            )
        )
    mass = None
    for acc in runs[cache_policy].results.values():
        if isinstance(acc, dict) and "mass" in acc:
            mass = merge(mass, acc["mass"])
    plot = out_dir / "dimuon-mass.png"
    if mass is not None:
        plot_mass(mass, plot)
    return DemoResult(
        runs=runs,
        baseline=baseline,
        predictions=predictions,
        plot=plot,
        params={cache_policy: policy_params},
    )


def _with_outputs(specs: list[JobSpec], directory: Path) -> list[JobSpec]:
    """The same jobs writing their results under ``directory``."""
    from dataclasses import replace

    return [replace(s, output=directory / s.output.name) for s in specs]
