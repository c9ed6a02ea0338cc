"""``datasched demo``: the runtime's tour on a synthetic dataset.

A workload of overlapping jobs (as many physicists reading the same hot segments) runs three
times on the same cluster with cold caches each time: under processing-farm scheduling, under
a cache-aware policy, and as a plain Dask map of the same packets through the same worker
caches with placement left to Dask. The simulator, given the same jobs, cluster and calibrated
costs, predicts each policy's makespan beside the measured one. Beside each makespan stands
the run's physical floor: its distinct bytes over the aggregate tertiary bandwidth, and its
CPU time over this machine's cores; a timeline of the three runs on one time axis shows
where each spends its time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from datasched._files import atomic_write_text
from datasched.compare.predict import predict_makespan
from datasched.core.packets import PacketSizing
from datasched.runtime.coreshare import MachineLoad, core_share, measure_machine_load
from datasched.runtime.daskmap import run_dask_map
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.outputs import merge
from datasched.runtime.reports import EngineConfig, ProgressSink, RunReport
from datasched.runtime.session import (
    Calibration,
    ClusterOptions,
    calibrate_on_cluster,
    job_space,
    open_cluster,
    run_jobs,
)
from datasched.sim.parallel import usable_cores

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


@dataclass(frozen=True, slots=True)
class Floor:
    """What no schedule can beat: the distinct bytes over the aggregate tertiary bandwidth,
    and the run's CPU time over the machine's cores."""

    tertiary_s: float
    cpu_s: float

    @property
    def seconds(self) -> float:
        return max(self.tertiary_s, self.cpu_s)


def floor_of(report: RunReport, distinct_bytes: int, bandwidth: float, cores: int) -> Floor:
    """The physical floor of ``report``'s run (CPU: its packets' thread time)."""
    cpu = sum(p.cpu_s for p in report.packets)
    return Floor(distinct_bytes / bandwidth, cpu / max(cores, 1))


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
    floors: dict[str, Floor] = field(default_factory=dict)
    """Each run's physical floor (the dask map's under "dask map")."""
    timeline: Path | None = None

    def all_runs(self) -> dict[str, RunReport]:
        return {**self.runs, "dask map": self.baseline}

    def as_json(self) -> dict[str, Any]:
        return {
            "policies": {name: r.summary() for name, r in self.runs.items()},
            "dask_baseline": self.baseline.summary(),
            "sim_prediction": {
                name: {"makespan_s": round(s, 3)} for name, s in self.predictions.items()
            },
            "floor_s": {
                name: {"tertiary": round(f.tertiary_s, 2), "cpu": round(f.cpu_s, 2)}
                for name, f in self.floors.items()
            },
            "scheduling_ms_per_packet": {
                name: round(r.scheduling_ms_per_packet, 4) for name, r in self.runs.items()
            },
            "notes": self.notes,
            "plot": str(self.plot),
            "timeline": str(self.timeline) if self.timeline else None,
        }

    def table(self) -> Table:
        table = Table(title="the same jobs, three ways (cold caches each time)")
        # Fits 80 columns (a log, a pipe): the run's parameters go on a line of their own.
        table.add_column("run")
        for col in ("makespan", "simulated", "floor", "cache hits", "tertiary"):
            table.add_column(col, justify="right", no_wrap=True)
        for name, r in self.all_runs().items():
            predicted = self.predictions.get(name)
            params = self.params.get(name)
            label = (
                f"{name}\n({', '.join(f'{k}={v}' for k, v in params.items())})" if params else name
            )
            if r.events_processed != r.events_expected:
                label += f"\n({r.events_processed:,} of {r.events_expected:,} events)"
            floor = self.floors.get(name)
            table.add_row(
                label,
                f"{r.makespan_s:.1f} s",
                f"{predicted:.1f} s" if predicted is not None else "-",
                f"{floor.seconds:.1f} s" if floor is not None else "-",
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
    replicate_hot: int | None = None,
    progress_factory: Callable[[int], AbstractContextManager[ProgressSink]] | None = None,
    log: Callable[[str], None] | None = None,
    machine_load: Callable[[int], MachineLoad] = measure_machine_load,
) -> DemoResult:
    """Create the dataset if absent, run the three variants, predict, plot.

    ``policy_params`` go to ``cache_policy`` (default: :data:`DEMO_POLICY_PARAMS`);
    ``replicate_hot`` runs hot-file replication beside both policies (and in their
    predictions); ``machine_load`` measures what other programs want of the machine's
    cores before each run (given the cores), which the simulator charges."""
    from datasched.runtime.demodata import (
        demo_dataset_is_current,
        plot_mass,
        write_demo_dataset,
    )
    from datasched.runtime.timeline import plot_timelines

    catalog = data_dir / "catalog.yaml"
    if not catalog.exists() or not demo_dataset_is_current(catalog):
        if log is not None:
            again = " again (the one there is an older version's)" if catalog.exists() else ""
            log(f"writing the demo dataset to {data_dir}{again} ...")
        catalog = write_demo_dataset(data_dir, n_events=DEMO_EVENTS, n_files=DEMO_FILES)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = load_jobs(demo_workload(catalog, out_dir))
    space = job_space(specs)
    opts = ClusterOptions(
        workers=workers,
        cache_bytes=int(CACHE_FRACTION * space.n_bytes * 1.05),
        cache_root=out_dir / "caches",
        tertiary_bytes_per_s=tertiary_bytes_per_s,
        replicate_hot=replicate_hot,
    )
    config = EngineConfig(queue_s=0.5)
    packets = PacketSizing(target_s=0.5, min_events=500)
    total = sum(s.n_events for s in specs)
    cores = usable_cores()

    def bars() -> AbstractContextManager[Any]:
        return progress_factory(total) if progress_factory is not None else nullcontext(None)

    if policy_params is None:
        policy_params = DEMO_POLICY_PARAMS.get(cache_policy, {})
    runs: dict[str, RunReport] = {}
    predictions: dict[str, float] = {}
    if log is not None:
        log("timing the processor on a worker ...")
    # Measured once, on a worker of a cluster like the runs' (through its cache); as each
    # node has it when the workers share this machine's cores with each other and with
    # what other programs want of them, measured just before each run (the machine's load
    # moves). The runs' packets and the simulator both use it.
    calibration = asyncio.run(_calibrate(specs, opts))
    notes: list[str] = []
    if replicate_hot is not None:
        notes.append(
            f"hot files copied between worker caches beside both policies, one more copy per "
            f"{replicate_hot} jobs reading a file (docs/replication.md)"
        )
    loads: dict[str, MachineLoad] = {}
    for name in ("farm", cache_policy):
        params = policy_params if name == cache_policy else {}
        loads[name] = load = machine_load(cores)
        calibration = shared_cores(calibration, workers, cores, load.others)
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
                    packets=packets,
                    progress=sink,
                    cold=True,
                    calibration=calibration,
                )
            )
        calibration = runs[name].calibration
        assert isinstance(calibration, Calibration)
        # The run's calibration is already per node (shared_cores above), and shared_cores
        # leaves it so: scaled twice, every event was charged twice the CPU it costs.
        predictions[name] = predict_makespan(
            specs,
            opts,
            shared_cores(calibration, workers, cores, load.others),
            policy=name,
            policy_params=params,
            packets=packets,
            config=config,
        )
    notes.extend(_share_notes(loads, workers, cores))
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
    distinct = sum(space.files[i].n_bytes for i in space.files_in(_all_data(space, specs)))
    bandwidth = workers * tertiary_bytes_per_s
    result = DemoResult(
        runs=runs,
        baseline=baseline,
        predictions=predictions,
        plot=plot,
        notes=notes,
        params={cache_policy: policy_params},
    )
    result.floors = {
        name: floor_of(r, distinct, bandwidth, cores) for name, r in result.all_runs().items()
    }
    result.timeline = plot_timelines(
        result.all_runs(),
        out_dir / "timelines.png",
        title="the same jobs three ways, on one time axis",
    )
    return result


async def _calibrate(specs: list[JobSpec], opts: ClusterOptions) -> Calibration:
    async with open_cluster(opts) as (client, _):
        return await calibrate_on_cluster(
            client, specs, job_space(specs), opts.tertiary_bytes_per_s
        )


def _share_notes(loads: dict[str, MachineLoad], workers: int, cores: int) -> list[str]:
    """What the simulator gave each node of a core, and why, when it was less than one."""
    notes = []
    busy = {name: load for name, load in loads.items() if load.others >= 0.5}
    if workers > cores and not busy:
        notes.append(
            f"the {workers} workers share this machine's {cores} cores: the simulator gives "
            f"each node {core_share(cores, workers):.2g} of a core"
        )
    for name, load in busy.items():
        notes.append(
            f"before '{name}', other programs kept {load.others:.1f} threads runnable on this "
            f"machine's {cores} cores: the simulator gives each of the {workers} nodes "
            f"{load.share(workers):.2g} of a core"
        )
    return notes


def shared_cores(
    calibration: Calibration, workers: int, cores: int, others: float = 0.0
) -> Calibration:
    """The calibration as the simulator should see this machine's cluster: when more
    workers than cores share it, with ``others`` runnable threads of other programs beside
    them (:func:`~datasched.runtime.coreshare.measure_machine_load`), each node has
    ``cores / (workers + others)`` of a core (at most one), so an event costs that much
    more time on a node than its CPU time alone (the calibration ran alone). Scaling from
    the share the calibration already assumes, so a calibration scaled once comes back as
    it is."""
    share = core_share(max(cores, 1), max(workers, 1), others)
    if share == calibration.core_share:
        return calibration
    cost = calibration.cost
    factor = calibration.core_share / share
    scaled = replace(
        cost,
        cpu_s_per_event=cost.cpu_s_per_event * factor,
        fresh_cpu_s_per_event=cost.fresh_cpu_s_per_event * factor,
        # The per-packet round trip is CPU in the master, Dask and the worker: shared out
        # like the rest (docs/performance.md, "Per-packet cost"). The master is one more
        # thread wanting a core: its serial part goes at the same share, one packet at a
        # time (the simulator's queue at the master, "Prediction on a shared machine").
        packet_overhead_s=cost.packet_overhead_s * factor,
        master_s_per_packet=cost.master_s_per_packet * factor,
    )
    return Calibration(
        scaled, calibration.tertiary_bytes_per_s, calibration.measured, core_share=share
    )


def _all_data(space: Any, specs: list[JobSpec]) -> Any:
    from datasched.core.intervals import IntervalSet
    from datasched.runtime.space import job_events

    out = IntervalSet()
    for s in specs:
        out = out | job_events(space, s.dataset, s.start, s.stop)
    return out


def _with_outputs(specs: list[JobSpec], directory: Path) -> list[JobSpec]:
    """The same jobs writing their results under ``directory``."""
    from dataclasses import replace

    return [replace(s, output=directory / s.output.name) for s in specs]
