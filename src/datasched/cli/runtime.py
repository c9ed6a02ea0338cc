"""Commands of the real runtime: ``run`` (jobs from YAML on Dask workers), ``demo-data``
and ``demo``. The runtime's packages are an extra; without them these commands say how to
install them."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from datasched.cli.app import app
from datasched.cli.common import err, fail, out, print_json, size
from datasched.cli.options import ParamOpt, SlotsOpt, policy_params_of, with_policy_options
from datasched.policies import UnknownPolicyError, get_policy

if TYPE_CHECKING:
    from datasched.runtime.reports import RunReport

__all__: list[str] = []

INSTALL_HINT = "the runtime needs its extra: pip install 'datasched[runtime]'"


@contextmanager
def runtime_errors() -> Iterator[None]:
    """Bad input of the runtime commands as one ``error:`` line (exit 2)."""
    try:
        from datasched.runtime.dataset import CatalogError, DatasetError
        from datasched.runtime.jobspec import JobSpecError
        from datasched.runtime.processor import ProcessorError
        from datasched.runtime.session import ClusterSetupError
    except ModuleNotFoundError as exc:
        fail(f"{INSTALL_HINT} ({exc.name} is missing)")
    try:
        yield
    except (JobSpecError, ProcessorError) as exc:
        if exc.traceback:  # the user's own traceback (their file and line) under the line
            err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            show_traceback(exc.traceback)
            raise typer.Exit(2) from None
        fail(str(exc))
    except (CatalogError, DatasetError, ClusterSetupError) as exc:
        fail(str(exc))
    except UnknownPolicyError as exc:
        fail(f"--policy: {exc}")


def show_traceback(text: str) -> None:
    """A user's traceback on stderr, indented under the error line that names it."""
    if text:
        err.print(
            "\n".join("  " + line for line in text.splitlines()),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


class BarProgress:
    """Rich progress bars: one per job and one overall, with events/s and cache hits."""

    def __init__(self, progress: Progress, total_events: int) -> None:
        self.progress = progress
        self.total = progress.add_task("all jobs", total=total_events, hits="")
        self.tasks: dict[str, TaskID] = {}
        self.done = 0
        self.hits = 0
        self.t0 = time.monotonic()

    def job_started(self, job_id: str, n_events: int) -> None:
        self.tasks[job_id] = self.progress.add_task(job_id, total=n_events, hits="")

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None:
        self.done += n_events
        self.hits += n_events if from_cache else 0
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        note = f"{rate:,.0f} ev/s  cache {self.hits / max(self.done, 1):.0%}"
        self.progress.update(self.tasks[job_id], advance=n_events)
        self.progress.update(self.total, advance=n_events, hits=note)

    def job_done(self, job_id: str, status: str) -> None:
        task = self.tasks.get(job_id)
        if task is not None:
            self.progress.update(task, description=f"{job_id} [{status}]")


def progress_bars(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[hits]}"),
        console=err,
        disable=quiet,
        transient=False,
    )


def jobs_table(report: RunReport, title: str) -> Table:
    table = Table(title=title)
    for col in ("job", "status", "events", "wait", "wall", "cache hits", "from tertiary"):
        table.add_column(col, justify="left" if col in ("job", "status") else "right")
    for j in report.jobs:
        status = j.status if j.status == "completed" else f"[red]{j.status}[/red]"
        table.add_row(
            j.id,
            status,
            f"{j.events_processed:,}/{j.events_expected:,}",
            f"{j.wait_s:.1f} s",
            f"{j.wall_s:.1f} s",
            f"{j.cache_hit_ratio:.0%}",
            size(j.bytes_from_tertiary),
        )
    return table


PACKET_COLUMNS = (
    "job",
    "node",
    "url",
    "start",
    "stop",
    "source",
    "bytes_from_tertiary",
    "bytes_from_peer",
    "read_s",
    "compute_s",
)


def write_packets_csv(report: RunReport, path: Path) -> None:
    """Per-packet statistics (node, range, source, bytes, read and compute time) as CSV."""
    from datasched._files import atomic_write_text

    rows = [[getattr(p, c) for c in PACKET_COLUMNS] for p in report.packets]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(PACKET_COLUMNS)
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def cluster_options(
    workers: int,
    cache_gb: float,
    cache_dir: Path,
    scheduler: str | None,
    tertiary_mb_s: float | None,
    slots: int = 1,
) -> Any:
    from datasched.runtime.session import ClusterOptions

    if workers < 1:
        fail(f"--workers: must be at least 1, got {workers}")
    if slots < 1:
        fail(f"--slots: must be at least 1, got {slots}")
    if not cache_gb >= 0:
        fail(f"--cache-gb: must not be negative, got {cache_gb}")
    if tertiary_mb_s is not None and not tertiary_mb_s > 0:
        fail(f"--tertiary-mb-s: must be positive, got {tertiary_mb_s}")
    return ClusterOptions(
        workers=workers,
        slots=slots,
        cache_bytes=int(cache_gb * 1e9),
        cache_root=cache_dir,
        scheduler_address=scheduler,
        tertiary_bytes_per_s=tertiary_mb_s * 1e6 if tertiary_mb_s else None,
    )


PolicyOption = Annotated[
    str,
    typer.Option(
        "--policy",
        "-p",
        help="Scheduling policy (see 'datasched policies').",
        metavar="NAME",
    ),
]
WorkersOption = Annotated[
    int, typer.Option("--workers", "-w", help="Worker processes of the embedded cluster.")
]
CacheGbOption = Annotated[float, typer.Option("--cache-gb", help="Disk cache per worker, GB.")]
CacheDirOption = Annotated[
    Path,
    typer.Option(
        "--cache-dir",
        help="Where the workers' persistent caches live (one directory per worker name).",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDR",
        help="Use an existing Dask cluster (tcp://HOST:PORT) instead of starting one; its "
        "workers must have stable names (dask worker --name, or dask-jobqueue).",
    ),
]
TertiaryOption = Annotated[
    float | None,
    typer.Option(
        "--tertiary-mb-s",
        help="Throttle reads from tertiary storage to this many MB/s per worker (stands in "
        "for tape in demos and tests). Default: unthrottled.",
    ),
]


@app.command("run")
@with_policy_options
def run(
    jobs_file: Annotated[
        Path, typer.Argument(metavar="JOBS.yaml", help="Jobs to run (see the README).")
    ],
    policy: PolicyOption = "out-of-order",
    params: ParamOpt = None,
    workers: WorkersOption = 4,
    slots: SlotsOpt = 1,
    cache_gb: CacheGbOption = 2.0,
    cache_dir: CacheDirOption = Path(".datasched-cache"),
    scheduler: SchedulerOption = None,
    tertiary_mb_s: TertiaryOption = None,
    packet_s: Annotated[
        float, typer.Option("--packet-s", help="Aimed seconds of work per packet.")
    ] = 2.0,
    packets_csv: Annotated[
        Path | None,
        typer.Option("--packets", metavar="CSV", help="Write per-packet statistics here."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else.")
    ] = False,
    named: dict[str, str] | None = None,
) -> None:
    """Run the jobs of a YAML file on Dask workers with per-worker disk caches, scheduled by a
    policy of the core (the same code the simulator runs). Shows progress bars, then a summary;
    each job's merged result goes to its output file."""
    with runtime_errors():
        from datasched.runtime.jobspec import load_jobs
        from datasched.runtime.reports import EngineConfig

        get_policy(policy)  # an unknown name: one line naming the known ones
        policy_params = policy_params_of(policy, params, named)
        specs = load_jobs(jobs_file)
        opts = cluster_options(workers, cache_gb, cache_dir, scheduler, tertiary_mb_s, slots)
        if not packet_s > 0:
            fail(f"--packet-s: must be positive, got {packet_s}")
        config = EngineConfig(packet_target_s=packet_s)
    report = _run_with_bars(specs, opts, policy, policy_params, config, quiet=as_json)
    if packets_csv is not None:
        write_packets_csv(report, packets_csv)
    if as_json:
        print_json(
            {
                "policy": policy,
                **report.summary(),
                "scheduling_ms_per_packet": round(report.scheduling_ms_per_packet, 4),
                "jobs": [j.as_dict() for j in report.jobs],
            }
        )
    else:
        out.print(jobs_table(report, f"{policy}: {len(report.jobs)} jobs"))
        out.print(
            f"makespan {report.makespan_s:.1f} s, cache hits {report.cache_hit_ratio:.0%}, "
            f"{size(report.bytes_from_tertiary)} from tertiary storage, master "
            f"{report.scheduling_ms_per_packet:.2f} ms per packet",
            highlight=False,
        )
    report_failures(report)


def report_failures(report: RunReport) -> None:
    """Each failed job named on stderr with its reason (and the user's traceback when their
    code raised); exit code 1 if any failed."""
    if any(j.status != "completed" for j in report.jobs):
        for j in report.jobs:
            if j.error:
                err.print(f"error: job {j.id}: {j.error}", markup=False, highlight=False)
                show_traceback(j.traceback)
        raise typer.Exit(1)


def _run_with_bars(
    specs: list[Any],
    opts: Any,
    policy: str,
    params: dict[str, Any],
    config: Any,
    *,
    quiet: bool,
    cold: bool = False,
) -> RunReport:
    from datasched.runtime.session import run_jobs

    total = sum(s.n_events for s in specs)
    with progress_bars(quiet) as bars:
        sink = BarProgress(bars, total)
        return asyncio.run(
            run_jobs(
                specs,
                opts,
                policy=policy,
                policy_params=params,
                config=config,
                progress=sink,
                cold=cold,
            )
        )


@app.command("demo-data")
def demo_data(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where the files go.")],
    events: Annotated[int, typer.Option("--events", help="Events in all.")] = 200_000,
    files: Annotated[int, typer.Option("--files", help="Number of ROOT files.")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 1,
) -> None:
    """Write a synthetic collision dataset: ROOT TTrees of muons (pt, eta, phi, charge) with a
    Z->mumu peak over a falling background, and a catalog.yaml naming it 'zmumu'."""
    if files < 1:
        fail(f"--files: must be at least 1, got {files}")
    if events < files:
        fail(f"--events: must be at least --files ({files}), got {events}")
    with runtime_errors():
        from datasched.runtime.demodata import write_demo_dataset

        catalog = write_demo_dataset(directory, n_events=events, n_files=files, seed=seed)
    out.print(f"catalog: {catalog}", highlight=False)


@app.command("demo")
def demo(
    data_dir: Annotated[
        Path, typer.Option("--data", metavar="DIR", help="Demo dataset (created if absent).")
    ] = Path("out/demo-data"),
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Outputs, plot and packet tables.")
    ] = Path("out/demo-run"),
    policy: PolicyOption = "out-of-order",
    params: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-P",
            metavar="NAME=VALUE",
            help="A parameter of the cache-aware policy (default for out-of-order: "
            "replication=true, reads from peers' caches).",
        ),
    ] = None,
    workers: WorkersOption = 4,
    tertiary_mb_s: Annotated[
        float, typer.Option("--tertiary-mb-s", help="Throttled tertiary storage, MB/s/worker.")
    ] = 0.25,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else.")
    ] = False,
) -> None:
    """The runtime tour (about a minute): overlapping jobs on a synthetic dataset, run under
    processing-farm scheduling, under a cache-aware policy, and as a plain Dask map through the
    same worker caches; a comparison table with the simulator's prediction beside the measured
    makespans, and the dimuon-mass plot."""
    with runtime_errors():
        from datasched.compare.demo import run_demo

        get_policy(policy)  # an unknown name: one line naming the known ones
        policy_params = policy_params_of(policy, params) if params else None
        if workers < 1:
            fail(f"--workers: must be at least 1, got {workers}")
        if not tertiary_mb_s > 0:
            fail(f"--tertiary-mb-s: must be positive, got {tertiary_mb_s}")
        result = run_demo(
            data_dir,
            out_dir,
            cache_policy=policy,
            policy_params=policy_params,
            workers=workers,
            tertiary_bytes_per_s=tertiary_mb_s * 1e6,
            progress_factory=None if as_json else (lambda total: _DemoBars(total)),
            log=None if as_json else (lambda line: out.print(line, highlight=False)),
        )
    if as_json:
        print_json(result.as_json())
        return
    out.print(result.table())
    out.print(f"plot: {result.plot}", highlight=False)


class _DemoBars:
    """Progress bars for one demo run (opened and closed around it)."""

    def __init__(self, total: int) -> None:
        self.bars = progress_bars(False)
        self.sink = BarProgress(self.bars, total)

    def __enter__(self) -> BarProgress:
        self.bars.__enter__()
        return self.sink

    def __exit__(self, *exc: object) -> None:
        self.bars.__exit__(None, None, None)
