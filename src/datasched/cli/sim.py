"""The simulator's main commands: ``sim`` (one policy at one load), ``max-load`` (the load a
cluster sustains) and ``sweep`` (policies, loads and cache sizes, as a CSV and a plot)."""

from __future__ import annotations

import csv
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from datasched.cli.app import app
from datasched.cli.common import (
    check_out_dir,
    check_out_file,
    cluster_errors,
    err,
    fail,
    jsonable,
    open_trace,
    out,
    parse_floats,
    print_json,
    sigterm_interrupts,
    user_errors,
    where_to_run,
)
from datasched.cli.options import (
    CacheOpt,
    FileGbOpt,
    JobsOpt,
    JsonOpt,
    LoadOpt,
    MinSubjobOpt,
    MtbfOpt,
    NodesOpt,
    ParamOpt,
    PipelineOpt,
    PolicyOpt,
    ProcessesOpt,
    RepairOpt,
    ReplicateHotOpt,
    SchedulerOpt,
    SeedOpt,
    SlotsOpt,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    TraceLogOpt,
    TraceOpt,
    WarmupOpt,
    check_named,
    make_config,
    refuse_overridden,
    with_policy_options,
)
from datasched.cli.tables import max_load_table, summary_detail, summary_table
from datasched.core.model import Pipelining
from datasched.policies import get_policy
from datasched.sim.experiment import (
    CONFIRM_FACTOR,
    ConfigError,
    Probe,
    SimConfig,
    search_max_load,
    simulate,
)
from datasched.sim.experiment import sweep as run_sweep
from datasched.sim.metrics import Summary
from datasched.sim.parallel import SchedulerRef
from datasched.studies.ponce.plots import plot_sweep, uses_cache

__all__ = ["keep_partial_sweep", "run_all", "write_sweep"]

ConfirmOpt = Annotated[
    int,
    typer.Option(
        "--confirm-factor",
        metavar="K",
        help="Confirm the bisection's answer by a run of K times --jobs jobs (1: do not).",
    ),
]


@app.command()
@with_policy_options
def sim(
    ctx: typer.Context,
    policy: PolicyOpt = "farm",
    nodes: NodesOpt = 10,
    slots: SlotsOpt = 1,
    cache_gb: CacheOpt = 100.0,
    file_gb: FileGbOpt = 0.0,
    load: LoadOpt = 1.0,
    jobs: JobsOpt = 2000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    trace: TraceOpt = None,
    node_mtbf_h: MtbfOpt = None,
    node_repair_h: RepairOpt = 1.0,
    replicate_hot: ReplicateHotOpt = None,
    param: ParamOpt = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the scheduler's books after the events (each job's subjobs partition "
            "what is left of it, every slot is running, idle or reserved, ...): slower; a "
            "broken invariant stops the run naming it.",
        ),
    ] = False,
    trace_log: TraceLogOpt = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            metavar="TIME",
            help="Stop at this simulated time (36h, 90d, 2w, 5000s; a bare number is hours): "
            "the figures are then partial (waits and speedups of the measured jobs ended by "
            "then; utilization and reads with the work under way).",
        ),
    ] = None,
    max_jobs: Annotated[
        int | None,
        typer.Option(
            "--max-jobs",
            metavar="N",
            help="Stop once N jobs have ended: the figures are then partial, of the measured "
            "jobs among the first N (as --until).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    named: dict[str, str] | None = None,
) -> None:
    """Simulate one policy at one load and print its steady-state figures.

    The *waiting time* runs from a job's submission to the start of its first part; the
    *speedup* is the job's time alone on one node without cache (0.8 s per event) over its
    processing time. Defaults are the paper's cluster: 10 nodes, 600 KB and 0.2 s of CPU per
    event, central storage at 1 MB/s per node, local disks at 10 MB/s, jobs of 40,000 events
    on average over a 2 TB dataset. `--slots`, `--file-gb` and `--node-mtbf-h` go beyond the
    paper: nodes of several CPUs, files cached whole, nodes that fail and come back.

    While it runs, stderr shows the simulated time, the jobs ended and the time left: a bar
    on a terminal, a line every 10 s otherwise. `--until` and `--max-jobs` stop a long run
    early, with figures marked partial; so does Ctrl-C (or SIGTERM), which then exits with
    status 130 (twice: at once, without figures).
    """
    from datasched.cli.simprogress import SimProgressView, interrupt_stops, parse_sim_time

    until_s = None
    if until is not None:
        try:
            until_s = parse_sim_time(until)
        except ValueError as exc:
            fail(f"--until: {exc}")
    if max_jobs is not None and max_jobs < 1:
        fail(f"--max-jobs: must be at least 1, got {max_jobs}")
    refuse_overridden(ctx, trace=trace, node_mtbf_h=node_mtbf_h)
    with user_errors():
        config = make_config(
            policy,
            nodes=nodes,
            slots=slots,
            file_gb=file_gb,
            node_mtbf_h=node_mtbf_h,
            node_repair_h=node_repair_h,
            cache_gb=cache_gb,
            load=load,
            jobs=jobs,
            seed=seed,
            pipeline=pipeline,
            warmup=warmup,
            min_subjob=min_subjob,
            trace=trace,
            params=param,
            named=named,
            replicate_hot=replicate_hot,
        )
        check_out_file(trace_log, "--trace-log")
    view = SimProgressView(f"{policy}, {config.n_jobs} jobs", quiet=as_json)
    with view, open_trace(trace_log) as sink, interrupt_stops() as stop:
        summary, _ = simulate(
            config,
            validate=check or None,
            trace=sink,
            until=until_s,
            max_jobs=max_jobs,
            on_progress=view,
            stop=stop,
        )
    if as_json:
        print_json(jsonable(summary.to_dict()))
    else:
        out.print(summary_detail(summary))
        out.print(
            f"{summary.events_handled} scheduler events in {summary.wall_s:.2f} s of "
            "wall-clock time",
            highlight=False,
        )
    if summary.stopped_by == "interrupt":
        raise typer.Exit(130)  # as a shell reports a command ended by Ctrl-C


@app.command("max-load")
@with_policy_options
def max_load(
    policy: PolicyOpt = "farm",
    nodes: NodesOpt = 10,
    slots: SlotsOpt = 1,
    cache_gb: CacheOpt = 100.0,
    file_gb: FileGbOpt = 0.0,
    jobs: JobsOpt = 2000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    param: ParamOpt = None,
    confirm_factor: ConfirmOpt = CONFIRM_FACTOR,
    as_json: JsonOpt = False,
    named: dict[str, str] | None = None,
) -> None:
    """Find the largest load (jobs/h) the cluster sustains under a policy before its queues
    grow without end.

    Bisection over the load with runs of --jobs jobs; every probe replays the same jobs
    (same sizes and start points, arrivals scaled), so probes differ only in load. A short
    run cannot tell a load a few per cent above capacity from one below it, so the answer
    is confirmed by a run --confirm-factor times as long; if that run is overloaded, the
    search goes on below it with long runs. Each probe is printed on stderr as it finishes;
    the result gives the bracket found: the highest load sustained and the lowest
    overloaded.
    """
    probes: list[dict[str, Any]] = []

    def on_step(probe: Probe) -> None:
        probes.append(probe.to_dict())
        if not as_json:
            verdict = (
                Text("overloaded", style="red") if probe.overloaded else Text("ok", style="green")
            )
            err.print(
                f"  probe {len(probes):2d}: {probe.load_jobs_per_h:7.3f} jobs/h  "
                f"{probe.n_jobs:6d} jobs  {verdict}",
                highlight=False,
            )

    with user_errors(confirm_factor="--confirm-factor"):
        config = make_config(
            policy,
            nodes=nodes,
            slots=slots,
            file_gb=file_gb,
            cache_gb=cache_gb,
            load=1.0,
            jobs=jobs,
            seed=seed,
            pipeline=pipeline,
            warmup=warmup,
            min_subjob=min_subjob,
            params=param,
            named=named,
        )
        if confirm_factor < 1:
            raise ConfigError("confirm_factor", f"must be at least 1, got {confirm_factor}")
    found = search_max_load(config, confirm_factor=confirm_factor, on_step=on_step)
    if as_json:
        print_json(
            {
                "policy": policy,
                "max_load_jobs_per_h": found.max_load_jobs_per_h,
                "highest_sustained_jobs_per_h": found.highest_sustained_jobs_per_h,
                "lowest_overloaded_jobs_per_h": found.lowest_overloaded_jobs_per_h,
                "policy_params": dict(config.policy_params),
                "n_nodes": nodes,
                "slots": slots,
                "cache_gb": cache_gb,
                "file_gb": file_gb,
                "pipeline": pipeline.value,
                "n_jobs": jobs,
                "confirm_factor": confirm_factor,
                "confirm_jobs": found.confirm_jobs,
                "seed": seed,
                "warmup_fraction": config.warmup_fraction,
                "cooldown_fraction": config.cooldown_fraction,
                "min_subjob_events": config.min_subjob_events,
                "probes": probes,
            }
        )
        return
    out.print(max_load_table(found, policy, f"{nodes} nodes, {cache_gb:g} GB cache each"))


def run_all(
    configs: Sequence[SimConfig],
    *,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    quiet: bool = False,
    finished: dict[int, Summary] | None = None,
) -> list[Summary]:
    """Simulate every config (in up to ``processes`` processes, or on the Dask cluster at
    ``scheduler``) with a progress bar on stderr (none when ``quiet``); the summaries in the
    order of ``configs``. ``finished`` gets each summary by the index of its config as it
    arrives: what a caller has when the runs are interrupted (KeyboardInterrupt, which
    stops the worker processes)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
    )
    with progress:
        what = f"simulating in {processes} processes" if processes > 1 else "simulating"
        if scheduler is not None:
            what = f"simulating on {scheduler}"
        task = progress.add_task(what, total=len(configs))

        def done(summary: Summary) -> None:
            label = f"{summary.policy} {summary.cache_gb:g} GB @ {summary.load_jobs_per_h:.3g}/h"
            progress.update(task, advance=1, description=f"{what}: {label} done")

        with cluster_errors():
            results = run_sweep(
                configs,
                on_result=done,
                processes=processes,
                scheduler=scheduler,
                on_done=None if finished is None else finished.__setitem__,
            )
        progress.update(task, description="done")
    return results


PARTIAL_STEM = "sweep.partial"
"""The name of an interrupted sweep's files (``sweep.partial.csv``, ``.png``): never taken
for a whole sweep's, nor written over one."""


def write_sweep(
    results: Sequence[Summary], out_dir: Path, *, partial: str = ""
) -> tuple[Path, Path]:
    """Write ``sweep.csv`` and ``sweep.png`` into ``out_dir``, all or nothing.

    Both are written into a temporary directory first. A new ``out_dir`` is that directory
    renamed (so it appears whole or not at all, and directories created for it are removed on
    failure); into an existing one the two files are renamed, replacing older ones, and the
    files of an earlier interrupted sweep there are removed.

    ``partial`` (what stopped it, e.g. "interrupted after 5 of 24 runs") writes the runs of
    an interrupted sweep instead, as ``sweep.partial.csv`` and ``sweep.partial.png`` (the
    plot's title says so), leaving a whole sweep's files there alone.
    """
    stem = PARTIAL_STEM if partial else "sweep"
    names = (f"{stem}.csv", f"{stem}.png")
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    base = out_dir if out_dir.is_dir() else out_dir.parent
    tmp = base / f".{out_dir.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.mkdir()
        with (tmp / names[0]).open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Summary)])
            writer.writeheader()
            for s in results:
                writer.writerow(s.to_dict())
        plot_sweep(
            results,
            tmp / names[1],
            title=f"PARTIAL ({partial}): mean speedup and waiting time" if partial else "",
        )
        if out_dir.is_dir():
            for name in names:
                (tmp / name).replace(out_dir / name)
            if not partial:  # an earlier interrupted sweep's, now superseded
                for name in (f"{PARTIAL_STEM}.csv", f"{PARTIAL_STEM}.png"):
                    (out_dir / name).unlink(missing_ok=True)
        else:
            tmp.replace(out_dir)
    except BaseException:
        for path in created[1:]:  # the parents made for out_dir, innermost first
            shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir / names[0], out_dir / names[1]


@app.command()
@with_policy_options
def sweep(
    ctx: typer.Context,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Directory for sweep.csv (one row per run) and sweep.png; made if missing.",
        ),
    ],
    policies: Annotated[
        list[str] | None,
        typer.Option(
            "--policies",
            metavar="A,B,...",
            help="Policies to compare, comma list or repeated. "
            "Default: farm, splitting, cache-splitting.",
        ),
    ] = None,
    loads: Annotated[
        list[str] | None,
        typer.Option(
            "--loads",
            metavar="LIST",
            help="Loads in jobs/h: a comma list (0.1,0.3,0.5) or START:STOP:COUNT, evenly "
            "spaced with both ends (0.1:1.5:8 is 8 loads). Default: 0.1:1.5:8.",
        ),
    ] = None,
    cache_gb: Annotated[
        list[str] | None,
        typer.Option(
            "--cache-gb",
            metavar="GB",
            help="Disk cache per node in GB, comma list or repeated: one curve per cache "
            "size for each cache-aware policy. Default: 100.",
        ),
    ] = None,
    nodes: NodesOpt = 10,
    slots: SlotsOpt = 1,
    file_gb: FileGbOpt = 0.0,
    jobs: JobsOpt = 1000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    node_mtbf_h: MtbfOpt = None,
    node_repair_h: RepairOpt = 1.0,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    param: ParamOpt = None,
    named: dict[str, str] | None = None,
) -> None:
    """Simulate every policy (and cache size) at every load: a table, a CSV and a plot of
    mean speedup and mean waiting time against load, like Figure 3 of ponce-hersch.

    Caches matter only to cache-aware policies, so farm and splitting run once per load.
    Runs that overload the cluster are kept in the CSV but cut from the plot, as in the
    paper. Interrupted (Ctrl-C, SIGTERM), the command stops its worker processes, prints the
    runs that finished in a table marked PARTIAL, writes them to sweep.partial.csv and
    sweep.partial.png (a whole sweep's files there are left alone) and exits with status 130.
    """
    load_list = parse_floats(loads or ["0.1:1.5:8"], "--loads")
    cache_list = parse_floats(cache_gb or ["100"], "--cache-gb")
    names = [
        p.strip()
        for text in policies or ["farm,splitting,cache-splitting"]
        for p in text.split(",")
        if p.strip()
    ]
    if not names:
        fail("--policies: no policy given")
    refuse_overridden(ctx, node_mtbf_h=node_mtbf_h)
    if len(set(cache_list)) > 1 and not any(uses_cache(name) for name in names):
        fail(
            f"--cache-gb: {len(set(cache_list))} sizes, but none of the policies swept "
            f"({', '.join(dict.fromkeys(names))}) uses a cache (--policies): each would run once"
        )
    named = named or {}
    configs: list[SimConfig] = []
    with user_errors(policy="--policies", load_jobs_per_h="--loads"):
        for name in names:
            get_policy(name)  # an unknown name is reported before anything runs
        check_named(named, list(dict.fromkeys(names)))
        # A -P parameter goes to the policies that take it, as a named option does.
        takes = {name: {p.name for p in get_policy(name).params} for name in names}
        keyed = [(i.partition("=")[0].strip().replace("-", "_"), i) for i in param or []]
        for key, _ in keyed:
            if not any(key in t for t in takes.values()):
                fail(f"-P {key}: none of the policies swept takes it ({', '.join(takes)})")
        for name in dict.fromkeys(names):
            mine = [item for key, item in keyed if key in takes[name]]
            for cache in dict.fromkeys(cache_list if uses_cache(name) else cache_list[:1]):
                for load in load_list:
                    configs.append(
                        make_config(
                            name,
                            nodes=nodes,
                            slots=slots,
                            file_gb=file_gb,
                            node_mtbf_h=node_mtbf_h,
                            node_repair_h=node_repair_h,
                            cache_gb=cache,
                            load=load,
                            jobs=jobs,
                            seed=seed,
                            pipeline=pipeline,
                            warmup=warmup,
                            min_subjob=min_subjob,
                            params=mine,
                            named=named,
                            strict=False,
                        )
                    )
    check_out_dir(out_dir)
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    title = f"{nodes} nodes, {jobs} jobs per run"
    finished: dict[int, Summary] = {}
    try:
        with sigterm_interrupts():
            results = run_all(configs, processes=processes, scheduler=target, finished=finished)
    except KeyboardInterrupt:
        _interrupted_sweep([finished[i] for i in sorted(finished)], len(configs), out_dir, title)
    with user_errors():
        csv_path, png_path = write_sweep(results, out_dir)
    out.print(summary_table(results, title=title))
    out.print(f"CSV:  {csv_path}\nplot: {png_path}", highlight=False)


def keep_partial_sweep(
    results: list[Summary], total: int, out_dir: Path
) -> tuple[str, tuple[Path, Path] | None]:
    """Runs of a sweep stopped by Ctrl-C or SIGTERM (its workers already stopped), in the
    order of the sweep: written marked partial (:func:`write_sweep`), and a line on stderr
    saying so. Returns what stopped it ("interrupted after 5 of 24 runs") and the CSV and
    plot written (None when no run finished: nothing is written)."""
    what = f"interrupted after {len(results)} of {total} runs"
    if not results:
        err.print(f"{what}: nothing written", highlight=False, markup=False)
        return what, None
    with user_errors():
        csv_path, png_path = write_sweep(results, out_dir, partial=what)
    err.print(
        f"{what}: the runs that finished are in {csv_path.name} and {png_path.name}, marked "
        "partial",
        highlight=False,
        markup=False,
    )
    return what, (csv_path, png_path)


def _interrupted_sweep(results: list[Summary], total: int, out_dir: Path, title: str) -> NoReturn:
    """A sweep stopped by Ctrl-C or SIGTERM: the runs that finished printed and written
    marked partial; exit 130, as ``reproduce`` does."""
    what, written = keep_partial_sweep(results, total, out_dir)
    if written is not None:
        out.print(summary_table(results, title=f"PARTIAL ({what}): {title}"))
        out.print(f"partial: {what}; the other runs were not made", highlight=False)
        out.print(f"CSV:  {written[0]}\nplot: {written[1]}", highlight=False)
    raise typer.Exit(130)  # as a shell reports a command ended by Ctrl-C
