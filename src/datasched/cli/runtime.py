"""Commands of the real runtime: ``run`` (jobs from YAML on Dask workers), ``demo-data``
and ``demo``. The runtime's packages are an extra; without them these commands say how to
install them."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from datasched.cli.app import app
from datasched.cli.common import (
    check_out_dir,
    check_out_file,
    err,
    fail,
    open_trace,
    out,
    print_json,
    reachable_scheduler,
    size,
)
from datasched.cli.live import BarProgress, progress_bars
from datasched.cli.options import (
    JobqueueArgsOpt,
    JobqueueOpt,
    ParamOpt,
    ReplicateHotOpt,
    SlotsOpt,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    TraceLogOpt,
    jobqueue_spec,
    policy_params_of,
    tls_files_of,
    with_policy_options,
)
from datasched.policies import UnknownPolicyError, get_policy

if TYPE_CHECKING:
    from datasched.core.trace import TraceSink
    from datasched.runtime.reports import RunReport

__all__: list[str] = []

INSTALL_HINT = "the runtime needs its extra: pip install 'datasched[runtime]'"


@contextmanager
def runtime_errors() -> Iterator[None]:
    """Bad input of the runtime commands as one ``error:`` line (exit 2)."""
    try:
        from datasched.runtime.batch import JobqueueError
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
    except (CatalogError, DatasetError, ClusterSetupError, JobqueueError) as exc:
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


def jobs_table(report: RunReport, title: str) -> Table:
    """Each job's figures, fitting 80 columns: a light frame, figures whole (never cut
    with an ellipsis), long job ids wrapped. ``cache`` is the share of its events read from
    a cache, ``tertiary`` the bytes it read from tertiary storage (the line under the table
    says the same for the run)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("job", overflow="fold", min_width=8)
    table.add_column("status", no_wrap=True)
    for col in ("events", "wait", "wall", "cache", "tertiary"):
        table.add_column(col, justify="right", no_wrap=True)
    for j in report.jobs:
        status = j.status if j.status == "completed" else Text(j.status, style="red")
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
    "bytes_read",
    "cpu_s",
    "t_start",
    "t_end",
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
    jobqueue: Any = None,
    replicate_hot: int | None = None,
    tls: Any = None,
) -> Any:
    """The cluster's options from the command line's; ``jobqueue``: a checked
    :func:`~datasched.cli.options.jobqueue_spec`; ``tls``: checked
    :func:`~datasched.cli.options.tls_files_of`."""
    from datasched.runtime.session import ClusterOptions

    if workers < 1:
        fail(f"--workers: must be at least 1, got {workers}")
    if slots < 1:
        fail(f"--slots: must be at least 1, got {slots}")
    if not cache_gb >= 0:
        fail(f"--cache-gb: must not be negative, got {cache_gb}")
    if tertiary_mb_s is not None and not tertiary_mb_s > 0:
        fail(f"--tertiary-mb-s: must be positive, got {tertiary_mb_s}")
    if replicate_hot is not None and replicate_hot < 1:
        fail(f"--replicate-hot: must be at least 1, got {replicate_hot}")
    return ClusterOptions(
        workers=workers,
        slots=slots,
        cache_bytes=int(cache_gb * 1e9),
        cache_root=cache_dir,
        scheduler_address=scheduler,
        tertiary_bytes_per_s=tertiary_mb_s * 1e6 if tertiary_mb_s else None,
        jobqueue=jobqueue,
        replicate_hot=replicate_hot,
        tls=tls,
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
    int,
    typer.Option(
        "--workers", "-w", help="Worker processes of the embedded cluster (or batch jobs)."
    ),
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
        help="Use an existing Dask cluster (tcp://HOST:PORT, or tls://HOST:PORT with "
        "--tls-ca-file, --tls-cert, --tls-key) instead of starting one; its workers must have "
        "stable names (dask worker --name, or dask-jobqueue). The cluster datasched starts "
        "itself is closed: TLS with credentials made for it, nothing on other interfaces "
        "than loopback.",
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
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    jobqueue: JobqueueOpt = None,
    jobqueue_args: JobqueueArgsOpt = None,
    tertiary_mb_s: TertiaryOption = None,
    replicate_hot: ReplicateHotOpt = None,
    packet_s: Annotated[
        float, typer.Option("--packet-s", help="Aimed seconds of work per packet.")
    ] = 2.0,
    chunksize: Annotated[
        int | None,
        typer.Option(
            "--chunksize",
            metavar="EVENTS",
            help="At most this many events a packet (coffea's chunksize), beside --packet-s.",
        ),
    ] = None,
    maxchunks: Annotated[
        int | None,
        typer.Option(
            "--maxchunks",
            metavar="N",
            help="Run only each job's first N chunks of --chunksize events (default "
            "100,000, coffea's), cut at file ends: for quick tests.",
        ),
    ] = None,
    skip_bad_files: Annotated[
        bool,
        typer.Option(
            "--skip-bad-files",
            help="Skip files that cannot be read (missing, corrupted, wrong tree) instead of "
            "failing their jobs; the summary lists them.",
        ),
    ] = False,
    no_calibrate: Annotated[
        bool,
        typer.Option(
            "--no-calibrate",
            help="Do not time the first job's processor on a worker before the run; the "
            "master starts from a guess and packets size themselves as they go.",
        ),
    ] = False,
    packets_csv: Annotated[
        Path | None,
        typer.Option("--packets", metavar="CSV", help="Write per-packet statistics here."),
    ] = None,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            "--report",
            metavar="DIR",
            help="Write the run's timeline (timeline.png: a lane per worker, packets "
            "coloured by where their data came from), packets.csv and summary.json here, "
            "and PROOF's monitor: monitor_packets.csv (node, file, events, latency, "
            "processing and CPU time, bytes per packet), progress.csv and progress.png "
            "(events/s, MB/s, active workers per job over time), packets.png (active "
            "workers; each packet's rate by local, peer, tertiary).",
        ),
    ] = None,
    trace_log: TraceLogOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else.")
    ] = False,
    named: dict[str, str] | None = None,
) -> None:
    """Run the jobs of a YAML file on Dask workers with per-worker disk caches, scheduled by a
    policy of the core (the same code the simulator runs). Shows progress bars, then a summary;
    each job's merged result goes to its output file."""
    with runtime_errors():
        from datasched.core.packets import PacketSizing
        from datasched.runtime.jobspec import limit_chunks, load_jobs
        from datasched.runtime.reports import EngineConfig

        get_policy(policy)  # an unknown name: one line naming the known ones
        policy_params = policy_params_of(policy, params, named)
        if not packet_s > 0:
            fail(f"--packet-s: must be positive, got {packet_s}")
        if chunksize is not None and chunksize < 1:
            fail(f"--chunksize: must be at least 1, got {chunksize}")
        if maxchunks is not None and maxchunks < 1:
            fail(f"--maxchunks: must be at least 1, got {maxchunks}")
        if report_dir is not None:
            check_out_dir(report_dir, "--report")
        check_out_file(packets_csv, "--packets", make_parents=True)
        check_out_file(trace_log, "--trace-log")
        tls = tls_files_of(scheduler, tls_ca_file, tls_cert, tls_key)
        batch = jobqueue_spec(jobqueue, jobqueue_args, scheduler)
        opts = cluster_options(
            workers,
            cache_gb,
            cache_dir,
            scheduler,
            tertiary_mb_s,
            slots,
            jobqueue=batch,
            replicate_hot=replicate_hot,
            tls=tls,
        )
        if scheduler is None and batch is None:  # the embedded cluster's caches are here
            from datasched.runtime.session import check_cache_root

            check_cache_root(opts.cache_root)
        specs = load_jobs(jobs_file, skip_bad_files=skip_bad_files)
        if scheduler is not None:  # one line within seconds, not the client's long wait
            reachable_scheduler(scheduler, tls)
        if maxchunks is not None:
            specs = limit_chunks(specs, chunksize or COFFEA_CHUNKSIZE, maxchunks)
        # About --packet-s of work queued on a worker while its packets are short.
        config = EngineConfig(queue_s=packet_s, skip_bad_files=skip_bad_files)
        packets = PacketSizing(target_s=packet_s, chunksize=chunksize)
        with open_trace(trace_log) as trace:
            report = _run_with_bars(
                specs,
                opts,
                policy,
                policy_params,
                config,
                packets=packets,
                quiet=as_json,
                calibrate=not no_calibrate,
                trace=trace,
            )
    if packets_csv is not None:
        write_packets_csv(report, packets_csv)
    if report_dir is not None:
        write_report(report, report_dir, f"{policy}: {len(report.jobs)} jobs")
    if as_json:
        print_json(
            {
                "policy": policy,
                **report.summary(),
                "scheduling_ms_per_packet": round(report.scheduling_ms_per_packet, 4),
                "notes": report.notes,
                "jobs": [j.as_dict() for j in report.jobs],
            }
        )
    else:
        out.print(jobs_table(report, f"{policy}: {len(report.jobs)} jobs"))
        out.print(
            f"makespan {report.makespan_s:.1f} s, cache hits {report.cache_hit_ratio:.0%}, "
            f"{size(report.bytes_from_tertiary)} from tertiary storage, "
            f"{size(report.bytes_read)} of branches read, master "
            f"{report.scheduling_ms_per_packet:.2f} ms per packet",
            highlight=False,
        )
        for url, reason in report.skipped_files:
            out.print(f"skipped: {url}: {reason}", markup=False, highlight=False)
        if report_dir is not None:
            out.print(f"report: {report_dir}", highlight=False)
    for note in report.notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    report_failures(report)


COFFEA_CHUNKSIZE = 100_000
"""coffea's default chunk: what --maxchunks counts in without --chunksize."""


def write_report(report: RunReport, directory: Path, title: str) -> None:
    """``--report``: the timeline, the packets and the summary of one run."""
    import json

    from datasched._files import atomic_write_text
    from datasched.runtime.monitor import write_monitor_report
    from datasched.runtime.timeline import plot_timelines

    directory.mkdir(parents=True, exist_ok=True)
    write_packets_csv(report, directory / "packets.csv")
    summary = {
        "title": title,
        **report.summary(),
        "notes": report.notes,
        "jobs": [j.as_dict() for j in report.jobs],
    }
    atomic_write_text(directory / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_timelines({title: report}, directory / "timeline.png")
    write_monitor_report(report, directory, title)


def report_failures(report: RunReport) -> None:
    """Each failed job named on stderr with its reason (and the user's traceback when their
    code raised); exit code 1 if any failed."""
    if any(j.status != "completed" for j in report.jobs):
        for j in report.jobs:
            if j.error:
                err.print(
                    f"error: job {j.id}: {j.error}", markup=False, highlight=False, soft_wrap=True
                )
                show_traceback(j.traceback)
        raise typer.Exit(1)


def _run_with_bars(
    specs: list[Any],
    opts: Any,
    policy: str,
    params: dict[str, Any],
    config: Any,
    *,
    packets: Any = None,
    quiet: bool,
    cold: bool = False,
    calibrate: bool = True,
    trace: TraceSink | None = None,
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
                packets=packets,
                progress=sink,
                cold=cold,
                calibrate=calibrate,
                trace=trace,
                log=None if quiet else (lambda line: err.print(f"note: {line}", markup=False)),
            )
        )
