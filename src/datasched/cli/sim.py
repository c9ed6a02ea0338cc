"""The simulator's commands: sim, max-load, sweep, scale, perf-map, policies, trace,
reproduce and demo-sim. Registered on the root app when :mod:`datasched.cli` is imported."""

from __future__ import annotations

import csv
import os
import secrets
import shutil
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from datasched.cli import (
    CacheOpt,
    FairnessOpt,
    JobsOpt,
    JsonOpt,
    LoadOpt,
    MinSubjobOpt,
    NodesOpt,
    ParamOpt,
    PeriodOpt,
    PipelineOpt,
    PolicyOpt,
    ProcessesOpt,
    ReplicateOpt,
    SchedulerOpt,
    SeedOpt,
    StripeOpt,
    TraceOpt,
    WarmupOpt,
    app,
    check_named,
    cluster_errors,
    err,
    fail,
    jsonable,
    make_config,
    named_options,
    out,
    print_json,
    reproduce_app,
    summary_detail,
    summary_table,
    trace_app,
    trace_rate_jobs_per_h,
    user_errors,
    where_to_run,
)
from datasched.core.model import Pipelining
from datasched.policies import available, get_policy
from datasched.sim.experiment import (
    CONFIRM_FACTOR,
    ConfigError,
    MaxLoadSearch,
    Probe,
    SimConfig,
    search_max_load,
    simulate,
)
from datasched.sim.experiment import sweep as run_sweep
from datasched.sim.metrics import Summary
from datasched.sim.plots import plot_sweep, uses_cache
from datasched.sim.workload import (
    WorkloadSpec,
    generate,
    load_trace,
    save_trace,
)

__all__: list[str] = []


@app.command()
def sim(
    policy: PolicyOpt = "farm",
    nodes: NodesOpt = 10,
    cache_gb: CacheOpt = 100.0,
    load: LoadOpt = 1.0,
    jobs: JobsOpt = 2000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    trace: TraceOpt = None,
    fairness_h: FairnessOpt = None,
    replicate_after: ReplicateOpt = None,
    period_h: PeriodOpt = None,
    stripe_events: StripeOpt = None,
    param: ParamOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate one policy at one load and print its steady-state figures.

    The *waiting time* runs from a job's submission to the start of its first part; the
    *speedup* is the job's time alone on one node without cache (0.8 s per event) over its
    processing time. Defaults are the paper's cluster: 10 nodes, 600 KB and 0.2 s of CPU per
    event, central storage at 1 MB/s per node, local disks at 10 MB/s, jobs of 40,000 events
    on average over a 2 TB dataset.
    """
    with user_errors():
        config = make_config(
            policy,
            nodes=nodes,
            cache_gb=cache_gb,
            load=load,
            jobs=jobs,
            seed=seed,
            pipeline=pipeline,
            warmup=warmup,
            min_subjob=min_subjob,
            trace=trace,
            params=param,
            named=named_options(fairness_h, replicate_after, period_h, stripe_events),
        )
    spinner = err.status(f"simulating {config.n_jobs} jobs under {policy} ...")
    with nullcontext() if as_json else spinner:
        summary, _ = simulate(config)
    if as_json:
        print_json(jsonable(summary.to_dict()))
        return
    out.print(summary_detail(summary))
    out.print(
        f"{summary.events_handled} scheduler events in {summary.wall_s:.2f} s of wall-clock time",
        highlight=False,
    )


ConfirmOpt = Annotated[
    int,
    typer.Option(
        "--confirm-factor",
        metavar="K",
        help="Confirm the bisection's answer by a run of K times --jobs jobs (1: do not).",
    ),
]


@app.command("max-load")
def max_load(
    policy: PolicyOpt = "farm",
    nodes: NodesOpt = 10,
    cache_gb: CacheOpt = 100.0,
    jobs: JobsOpt = 2000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    fairness_h: FairnessOpt = None,
    replicate_after: ReplicateOpt = None,
    period_h: PeriodOpt = None,
    stripe_events: StripeOpt = None,
    param: ParamOpt = None,
    confirm_factor: ConfirmOpt = CONFIRM_FACTOR,
    as_json: JsonOpt = False,
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
            verdict = "[red]overloaded[/red]" if probe.overloaded else "[green]ok[/green]"
            err.print(
                f"  probe {len(probes):2d}: {probe.load_jobs_per_h:7.3f} jobs/h  "
                f"{probe.n_jobs:6d} jobs  {verdict}",
                highlight=False,
            )

    with user_errors(confirm_factor="--confirm-factor"):
        config = make_config(
            policy,
            nodes=nodes,
            cache_gb=cache_gb,
            load=1.0,
            jobs=jobs,
            seed=seed,
            pipeline=pipeline,
            warmup=warmup,
            min_subjob=min_subjob,
            params=param,
            named=named_options(fairness_h, replicate_after, period_h, stripe_events),
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
                "cache_gb": cache_gb,
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


def max_load_table(found: MaxLoadSearch, policy: str, where: str) -> Table:
    """The answer of a maximal-load search and the bracket around it."""

    def load(value: float | None) -> str:
        return "none found" if value is None else f"{value:.3f} jobs/h"

    confirmed = (
        f"confirmed by a run of {found.confirm_jobs} jobs"
        if found.confirm_jobs > found.n_jobs
        else "unconfirmed"
    )
    table = Table(
        title=f"maximal sustainable load of {policy} ({where})",
        box=box.SIMPLE_HEAD,
        show_header=False,
        pad_edge=False,
    )
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    table.add_row(
        "maximal sustainable load", load(found.max_load_jobs_per_h), "the highest sustained"
    )
    table.add_row("highest sustained", load(found.highest_sustained_jobs_per_h), confirmed)
    table.add_row(
        "lowest overloaded", load(found.lowest_overloaded_jobs_per_h), "the limit lies below"
    )
    table.add_row("runs", f"{len(found.probes)}", f"of {found.n_jobs} jobs and longer")
    return table


def parse_floats(texts: str | Sequence[str], option: str) -> list[float]:
    """``0.1,0.2,0.5`` or ``START:STOP:COUNT`` (evenly spaced, both ends included); a list of
    such texts (a repeated option) is concatenated."""
    values: list[float] = []
    for text in [texts] if isinstance(texts, str) else texts:
        try:
            if ":" in text:
                start_s, stop_s, count_s = text.split(":")
                start, stop, count = float(start_s), float(stop_s), int(count_s)
                if count < 1:
                    raise ValueError
                step = (stop - start) / (count - 1) if count > 1 else 0.0
                # Rounded so that 0.1:1.5:8 gives 0.3, not 0.30000000000000004.
                values += [round(start + step * i, 12) for i in range(count)]
            else:
                values += [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            fail(f"{option}: expected a comma list like 0.1,0.5 or START:STOP:COUNT, got {text!r}")
    if not values:
        fail(f"{option}: no values given")
    return values


def parse_ints(text: str, option: str) -> list[int]:
    """``10,100,1000``: whole numbers only."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{option}: expected a comma list of whole numbers like 10,100, got {text!r}")
    if not values:
        fail(f"{option}: no values given")
    return values


def run_all(
    configs: Sequence[SimConfig],
    *,
    processes: int = 1,
    scheduler: str | None = None,
    quiet: bool = False,
) -> list[Summary]:
    """Simulate every config (in up to ``processes`` processes, or on the Dask cluster at
    ``scheduler``) with a progress bar on stderr (none when ``quiet``); the summaries in the
    order of ``configs``."""
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
            results = run_sweep(configs, on_result=done, processes=processes, scheduler=scheduler)
        progress.update(task, description="done")
    return results


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``--out`` that names a file, before anything runs."""
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out: {out_dir} exists and is not a directory")


def write_sweep(results: Sequence[Summary], out_dir: Path) -> tuple[Path, Path]:
    """Write ``sweep.csv`` and ``sweep.png`` into ``out_dir``, all or nothing.

    Both are written into a temporary directory first. A new ``out_dir`` is that directory
    renamed (so it appears whole or not at all, and directories created for it are removed on
    failure); into an existing one the two files are renamed, replacing older ones.
    """
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    base = out_dir if out_dir.is_dir() else out_dir.parent
    tmp = base / f".{out_dir.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.mkdir()
        with (tmp / "sweep.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Summary)])
            writer.writeheader()
            for s in results:
                writer.writerow(s.to_dict())
        plot_sweep(results, tmp / "sweep.png")
        if out_dir.is_dir():
            for name in ("sweep.csv", "sweep.png"):
                os.replace(tmp / name, out_dir / name)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        for path in created[1:]:  # the parents made for out_dir, innermost first
            shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir / "sweep.csv", out_dir / "sweep.png"


@app.command()
def sweep(
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
            "Default: farm,splitting,cache-splitting.",
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
    jobs: JobsOpt = 1000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
    warmup: WarmupOpt = 0.2,
    min_subjob: MinSubjobOpt = 10,
    fairness_h: FairnessOpt = None,
    replicate_after: ReplicateOpt = None,
    period_h: PeriodOpt = None,
    stripe_events: StripeOpt = None,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Simulate every policy (and cache size) at every load: a table, a CSV and a plot of
    mean speedup and mean waiting time against load, like Figure 3 of ponce-hersch.

    Caches matter only to cache-aware policies, so farm and splitting run once per load.
    Runs that overload the cluster are kept in the CSV but cut from the plot, as in the
    paper. Nothing is written unless every run finished.
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
    named = named_options(fairness_h, replicate_after, period_h, stripe_events)
    configs: list[SimConfig] = []
    with user_errors(policy="--policies", load_jobs_per_h="--loads"):
        for name in names:
            get_policy(name)  # an unknown name is reported before anything runs
        check_named(named, list(dict.fromkeys(names)))
        for name in dict.fromkeys(names):
            for cache in dict.fromkeys(cache_list if uses_cache(name) else cache_list[:1]):
                for load in load_list:
                    configs.append(
                        make_config(
                            name,
                            nodes=nodes,
                            cache_gb=cache,
                            load=load,
                            jobs=jobs,
                            seed=seed,
                            pipeline=pipeline,
                            warmup=warmup,
                            min_subjob=min_subjob,
                            named=named,
                            strict=False,
                        )
                    )
    check_out_dir(out_dir)
    processes, scheduler = where_to_run(processes, scheduler)
    results = run_all(configs, processes=processes, scheduler=scheduler)
    with user_errors():
        csv_path, png_path = write_sweep(results, out_dir)
    out.print(summary_table(results, title=f"{nodes} nodes, {jobs} jobs per run"))
    out.print(f"CSV:  {csv_path}\nplot: {png_path}", highlight=False)


@app.command()
def scale(
    policy: PolicyOpt = "farm",
    nodes: Annotated[
        str,
        typer.Option(
            "--nodes", metavar="N,N,...", help="Cluster sizes, comma list (e.g. 10,100,1000)."
        ),
    ] = "10,100",
    load: Annotated[
        float,
        typer.Option(
            "--load",
            metavar="JOBS/H",
            help="Load of a 10-node cluster in jobs/h; it grows in proportion to the nodes.",
        ),
    ] = 0.5,
    jobs: JobsOpt = 200,
    cache_gb: CacheOpt = 100.0,
    param: ParamOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the master's work as the cluster grows (ponce-hersch §8, Figure 16).

    Load and data space grow in proportion to the number of nodes; printed are the scheduler's
    time per job and the master's load (scheduler seconds per simulated second; 1.0 = one core
    fully busy).
    """
    from datasched.sim.scale import scale_point

    sizes = parse_ints(nodes, "--nodes")
    with user_errors():
        base = make_config(
            policy,
            nodes=10,
            cache_gb=cache_gb,
            load=load,
            jobs=jobs,
            seed=0,
            pipeline=Pipelining.NONE,
            warmup=0.2,
            min_subjob=10,
            params=param,
        )
        for n in sizes:
            if n < 1:
                raise ConfigError("n_nodes", f"must be a positive number, got {n}")
    points = []
    for n in sizes:
        if not as_json:
            err.print(f"  {n} nodes ...", highlight=False)
        points.append(scale_point(base, n))
    if as_json:
        print_json([asdict(p) for p in points])
        return
    table = Table(title=f"master's work under {policy}", box=box.SIMPLE_HEAD)
    for col in ("nodes", "jobs/h", "jobs", "ms per job", "master load"):
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(
            str(p.n_nodes),
            f"{p.load_jobs_per_h:.3g}",
            str(p.n_jobs),
            f"{p.scheduler_s_per_job * 1e3:.2f}",
            f"{p.master_load:.2e}",
        )
    out.print(table)


@app.command("perf-map")
def perf_map(
    out_path: Annotated[
        Path,
        typer.Option("--out", metavar="FILE", help="Where the map (JSON) goes."),
    ] = Path("out/perfmap.json"),
    periods_h: Annotated[
        str, typer.Option("--periods-h", metavar="H,H,...", help="Period delays, hours.")
    ] = "0,24,48,168",
    stripes: Annotated[
        str, typer.Option("--stripes", metavar="N,N,...", help="Stripe sizes, events.")
    ] = "200,1000,5000",
    caches_gb: Annotated[
        str, typer.Option("--caches-gb", metavar="G,G,...", help="Cache sizes per node, GB.")
    ] = "50,100,200",
    nodes: NodesOpt = 10,
    jobs: JobsOpt = 1000,
    seed: SeedOpt = 0,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Build the performance map of delayed scheduling (ponce-hersch Figure 9): its maximal
    sustainable load at every period, stripe size and cache size. Adaptive delay (§6) reads
    it: `-P performance_map=FILE` (without it, the map shipped with datasched is used)."""
    from datasched.policies.adaptive import MapPoint
    from datasched.sim.perfmap import build_map, save_map

    periods = parse_floats(periods_h, "--periods-h")
    if any(p < 0 for p in periods):
        fail("--periods-h: periods must be zero or positive")
    stripe_list = parse_ints(stripes, "--stripes")
    if any(s < 1 for s in stripe_list):
        fail("--stripes: stripe sizes must be positive")
    caches = parse_floats(caches_gb, "--caches-gb")
    if any(c < 0 for c in caches):
        fail("--caches-gb: cache sizes must be zero or positive")
    if out_path.is_dir():
        fail(f"--out: {out_path} is a directory")
    with user_errors():
        base = SimConfig(policy="delayed", n_nodes=nodes, n_jobs=jobs, seed=seed)
    processes, scheduler = where_to_run(processes, scheduler)
    total = len(periods) * len(stripe_list) * len(caches)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    with progress:
        task = progress.add_task("max-load searches", total=total)

        def done(point: MapPoint) -> None:
            progress.update(
                task,
                advance=1,
                description=f"{point.cache_gb:g} GB, stripe {point.stripe_events}, "
                f"{point.period_h:g} h: {point.max_load_jobs_per_h:.2f}/h",
            )

        with cluster_errors():
            pmap = build_map(
                base,
                periods_h=periods,
                stripes=stripe_list,
                caches_gb=caches,
                on_point=done,
                processes=processes,
                scheduler=scheduler,
            )
    meta = {"nodes": nodes, "jobs": jobs, "seed": seed, "command": "datasched perf-map"}
    with user_errors():
        save_map(pmap, out_path, meta=meta)
    out.print(f"map: {out_path}", highlight=False)


@app.command()
def policies() -> None:
    """List the scheduling policies: name (for `--policy`), the paper section each implements,
    and what it does."""
    table = Table(title="scheduling policies", box=box.SIMPLE_HEAD)
    table.add_column("name", style="bold")
    table.add_column("source")
    table.add_column("what it does")
    for name, cls in available().items():
        table.add_row(name, cls.section, cls.summary)
    out.print(table)


@trace_app.command("generate")
def trace_generate(
    out_file: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Trace CSV to write (replaced if there).")
    ],
    load: LoadOpt = 1.0,
    jobs: Annotated[int, typer.Option("--jobs", metavar="N", help="Jobs in the trace.")] = 1000,
    seed: SeedOpt = 0,
) -> None:
    """Write a synthetic job trace with the paper's workload: Erlang-4 job sizes of mean
    40,000 events, start points falling half of the time in two hot regions that hold 10 % of
    the data, Poisson arrivals. Replay it with `datasched sim --trace FILE`."""
    with user_errors():
        records = generate(WorkloadSpec(load_jobs_per_h=load, n_jobs=jobs, seed=seed))
    if not out_file.parent.is_dir():
        fail(f"--out: directory {out_file.parent} does not exist")
    if out_file.is_dir():
        fail(f"--out: {out_file} is a directory")
    with user_errors():
        save_trace(records, out_file)
    out.print(f"wrote {len(records)} jobs to {out_file}", highlight=False)


@trace_app.command("show")
def trace_show(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="Trace CSV to check and summarise.")],
) -> None:
    """Check a trace and summarise it: number of jobs, time span, arrival rate, mean size."""
    with user_errors():
        records = load_trace(path)
    span = records[-1].submit_s - records[0].submit_s
    mean = sum(r.n_events for r in records) / len(records)
    rate = trace_rate_jobs_per_h(records)
    rate_text = f"{rate:.3g} jobs/h" if rate is not None else "no rate: one submission time"
    out.print(f"{len(records)} jobs over {span / 3600:.1f} h ({rate_text})", highlight=False)
    out.print(
        f"mean size {mean:,.0f} events; "
        f"data space used up to event {max(r.stop_event for r in records):,}",
        highlight=False,
    )


@reproduce_app.command("ponce")
def reproduce_ponce(
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out", metavar="DIR", help="Directory for report.md, claims.csv and figures/."
        ),
    ],
    quick: Annotated[
        bool,
        typer.Option("--quick", metavar="", help="Fewer jobs and loads (under 3 minutes)."),
    ] = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Re-run the experiments behind ponce-hersch's numbers and figures (§3-§8): our
    Figures 3-12 and 14-16 (CSV and PNG each) and a report with the paper's value beside ours
    for every claim."""
    from datasched.sim.figures import write_figure
    from datasched.sim.reproduce import run_ponce, write_report

    check_out_dir(out_dir)
    processes, scheduler = where_to_run(processes, scheduler)
    where = f"on {scheduler}" if scheduler else f"in {processes} processes"
    with err.status(f"running the reproduction {where} ...") as status, cluster_errors():
        claims, results = run_ponce(
            quick=quick,
            processes=processes,
            scheduler=scheduler,
            progress=lambda m: status.update(m),
        )
    figs = {}
    for result in results:
        with user_errors():
            figs[result.spec.key] = write_figure(result, out_dir / "figures")
    shown = [(f.spec.title, f.png_path) for f in figs.values() if f.png_path is not None]
    with user_errors():
        _, md_path = write_report(
            claims, out_dir, title="Reproduction of ponce-hersch", figures=shown
        )
    table = Table(title="ponce-hersch: paper vs datasched")
    for col in ("claim", "paper", "ours", "agrees"):
        table.add_column(col)
    for c in claims:
        bound = {"at_most": "<= ", "at_least": ">= "}.get(c.bound, "")
        table.add_row(
            c.claim,
            f"{bound}{c.paper:g}",
            f"{c.ours:.3g}",
            "yes" if c.agrees else "[yellow]no[/yellow]",
        )
    out.print(table)
    out.print(f"report: {md_path}", highlight=False)
    out.print(f"figures: {out_dir / 'figures'}", highlight=False)


DEMO_POLICIES = ("farm", "splitting", "cache-splitting")
DEMO_LOADS = (0.2, 0.5, 0.8, 1.1)
DEMO_JOBS = 400


@app.command("demo-sim")
def demo_sim(
    out_dir: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="Where sweep.csv and sweep.png go."),
    ] = Path("out/demo"),
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            metavar="",
            help="Print one JSON object (every run, the CSV and plot paths) and nothing else.",
        ),
    ] = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """A short tour (well under a minute): the three first-come-first-served policies of
    ponce-hersch (processing farm, job splitting, cache-oriented splitting with 100 GB caches)
    at four loads on the paper's 10-node cluster, as a table, a CSV and a plot."""
    check_out_dir(out_dir)
    processes, scheduler = where_to_run(processes, scheduler)
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=DEMO_JOBS, cache_gb=100.0)
        for p in DEMO_POLICIES
        for load in DEMO_LOADS
    ]
    results = run_all(configs, processes=processes, scheduler=scheduler, quiet=as_json)
    with user_errors():
        csv_path, png_path = write_sweep(results, out_dir)
    if as_json:
        print_json(
            {
                "runs": [jsonable(r.to_dict()) for r in results],
                "csv": str(csv_path),
                "plot": str(png_path),
            }
        )
        return
    title = f"{DEMO_JOBS} jobs per run, 10 nodes, 100 GB caches"
    out.print(summary_table(results, title=title))
    out.print(f"plot: {png_path}", highlight=False)
