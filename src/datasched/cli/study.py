"""Studies made of many simulations: ``scale`` (the master's work as the cluster grows),
``perf-map`` (delayed scheduling's performance map), ``reproduce ponce`` (the paper's numbers
and figures beside ours) and ``demo-sim`` (a short tour)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from datasched.cli.app import app, reproduce_app
from datasched.cli.common import (
    check_out_dir,
    check_out_file,
    cluster_errors,
    err,
    fail,
    given,
    jsonable,
    keeping_runs,
    kept_runs,
    out,
    parse_floats,
    parse_ints,
    print_json,
    run_progress,
    sigterm_interrupts,
    user_errors,
    where_to_run,
)
from datasched.cli.options import (
    QUICK_TITLE,
    CacheOpt,
    JobsOpt,
    NodesOpt,
    ParamOpt,
    ProcessesOpt,
    ReportDirOpt,
    ResumeOpt,
    SchedulerOpt,
    SeedOpt,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    make_config,
)
from datasched.cli.sim import keep_partial_sweep, run_all, write_sweep
from datasched.cli.tables import claims_table, summary_table
from datasched.core.model import Pipelining
from datasched.sim.experiment import ConfigError, SimConfig
from datasched.sim.metrics import Summary
from datasched.studies.ponce.scale import ScalePoint

__all__: list[str] = []


@app.command()
def scale(
    ctx: typer.Context,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            metavar="NAME",
            help="A registered cluster policy, or one of the grid's schedulers (JobRandom, "
            "DataLeastLoaded, ...: `datasched policies` lists them).",
        ),
    ] = "farm",
    nodes: Annotated[
        str,
        typer.Option(
            "--nodes",
            metavar="N,N,...",
            help="Cluster sizes, comma list (e.g. 10,100,1000); for a grid scheduler, sites.",
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
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            metavar="",
            help="Print a JSON array on stdout, one object per size, and nothing else there "
            '("partial": true on each when interrupted).',
        ),
    ] = False,
) -> None:
    """Measure the master's work as the cluster grows (ponce-hersch §8, Figure 16).

    Load and data space grow in proportion to the number of nodes; printed are the scheduler's
    time per job and per decision (an event it handled), the master's load (scheduler seconds
    per simulated second; 1.0 = one core fully busy) and, extrapolated from the two largest
    sizes, the nodes one core could serve as master. A grid scheduler is timed on grids of
    that many sites in the paper's proportions (docs/scale.md). Interrupted (Ctrl-C,
    SIGTERM), the command prints the sizes that finished, marked partial (a PARTIAL title;
    `"partial": true` on each object of `--json`), and exits with status 130.
    """
    from datasched.policies.grid.schedulers import grid_schedulers
    from datasched.studies.ponce.scale import nodes_per_core, scale_point

    sizes = parse_ints(nodes, "--nodes")
    grid = policy in grid_schedulers()
    measure: Callable[[int], ScalePoint]
    if grid:
        from datasched.studies.grid.scale import grid_scale_point

        if param:
            fail("--param: the grid's schedulers are timed with their defaults")
        for name, flag in (("load", "--load"), ("cache_gb", "--cache-gb")):
            if given(ctx, name):  # the grid's proportions fix both
                fail(f"{flag}: not with --policy {policy} (a grid is timed in its own proportions)")
        if any(n < 2 for n in sizes):
            fail("--nodes: a grid needs at least 2 sites")

        def measure(n: int) -> ScalePoint:
            return grid_scale_point(policy, n, jobs)
    else:
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
                replace(base, n_nodes=n)  # each size checked before any runs

        def measure(n: int) -> ScalePoint:
            return scale_point(base, n)

    unit = "sites" if grid else "nodes"
    points: list[ScalePoint] = []
    stopped = ""
    try:
        with sigterm_interrupts():
            for n in sizes:
                if not as_json:
                    err.print(f"  {n} {unit} ...", highlight=False)
                points.append(measure(n))
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM: the size under way is dropped, the finished ones are shown.
        stopped = f"interrupted after {len(points)} of {len(sizes)} sizes"
        err.print(
            f"{stopped}: "
            + ("the finished ones follow, marked partial" if points else "nothing to show"),
            highlight=False,
            markup=False,
        )
        if not points:
            raise typer.Exit(130) from None
    served = nodes_per_core(points)
    if as_json:
        # JSON has no infinity: a master load that does not grow serves "any" size.
        per_core: float | str | None = "any" if served == math.inf else served
        print_json(
            [
                jsonable(
                    {
                        **asdict(p),
                        "us_per_decision": p.us_per_decision,
                        "nodes_per_core": per_core,
                        "partial": bool(stopped),
                    }
                )
                for p in points
            ]
        )
    else:
        _scale_table(points, policy, unit, served, stopped)
    if stopped:
        raise typer.Exit(130)  # as reproduce: a command ended by Ctrl-C or SIGTERM


def _scale_table(
    points: list[ScalePoint], policy: str, unit: str, served: float | None, stopped: str
) -> None:
    """``scale``'s table of ``points`` and the extrapolation; marked partial when
    ``stopped`` says the command was interrupted before its last size."""
    title = f"master's work under {policy}"
    if stopped:
        title = f"PARTIAL ({stopped}): {title}"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in (unit, "jobs/h", "jobs", "ms per job", "µs per decision", "master load"):
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(
            str(p.n_nodes),
            f"{p.load_jobs_per_h:.3g}",
            str(p.n_jobs),
            f"{p.scheduler_s_per_job * 1e3:.2f}",
            f"{p.us_per_decision:.1f}",
            f"{p.master_load:.2e}",
        )
    out.print(table)
    if served is not None:
        what = (
            f"far beyond 10 million {unit} (the master's load barely grows)"
            if served > 1e7
            else f"about {served:,.0f} {unit}"
        )
        out.print(
            f"one core serves as master up to {what}, extrapolated from the two "
            f"largest sizes{' measured' if stopped else ''}",
            highlight=False,
        )
    if stopped:
        out.print(f"partial: {stopped}; the larger sizes were not measured", highlight=False)


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
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
) -> None:
    """Build the performance map of delayed scheduling (ponce-hersch Figure 9): its maximal
    sustainable load at every period, stripe size and cache size. Adaptive delay (§6) reads
    it: `-P performance_map=FILE` (without it, the map shipped with datasched is used).

    Interrupted (Ctrl-C, SIGTERM), it stops its worker processes, writes the points found so
    far to FILE with `.partial` before its suffix (perfmap.partial.json; a whole map at FILE
    is left alone, and a later whole map removes the partial one), says so and exits with
    status 130."""
    from datasched.policies.ponce.adaptive import MapPoint, PerformanceMap
    from datasched.studies.ponce.perfmap import build_map, save_map

    periods = parse_floats(periods_h, "--periods-h")
    if any(p < 0 for p in periods):
        fail("--periods-h: periods must be zero or positive")
    stripe_list = parse_ints(stripes, "--stripes")
    if any(s < 1 for s in stripe_list):
        fail("--stripes: stripe sizes must be positive")
    caches = parse_floats(caches_gb, "--caches-gb")
    if any(c < 0 for c in caches):
        fail("--caches-gb: cache sizes must be zero or positive")
    check_out_file(out_path, "--out", make_parents=True)
    with user_errors():
        base = SimConfig(policy="delayed", n_nodes=nodes, n_jobs=jobs, seed=seed)
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    total = len(periods) * len(stripe_list) * len(caches)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    found: list[MapPoint] = []
    meta = {"nodes": nodes, "jobs": jobs, "seed": seed, "command": "datasched perf-map"}
    partial_path = out_path.with_name(f"{out_path.stem}.partial{out_path.suffix}")
    try:
        with progress, sigterm_interrupts():
            task = progress.add_task("max-load searches", total=total)

            def done(point: MapPoint) -> None:
                found.append(point)
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
                    scheduler=target,
                )
    except KeyboardInterrupt:
        stopped = f"interrupted after {len(found)} of {total} points"
        if not found:
            err.print(f"{stopped}: nothing written", highlight=False, markup=False)
            raise typer.Exit(130) from None
        # In the grid's order (they arrive in the order they finish).
        rank = {(c, s, p): i for i, (c, s, p) in enumerate(_grid(caches, stripe_list, periods))}
        found.sort(key=lambda q: rank[(q.cache_gb, q.stripe_events, q.period_h)])
        with user_errors():
            save_map(PerformanceMap(tuple(found)), partial_path, meta={**meta, "partial": stopped})
        err.print(
            f"{stopped}: the points found are in {partial_path.name}, marked partial",
            highlight=False,
            markup=False,
        )
        out.print(f"partial map ({stopped}): {partial_path}", highlight=False)
        raise typer.Exit(130) from None
    with user_errors():
        save_map(pmap, out_path, meta=meta)
        partial_path.unlink(missing_ok=True)  # an earlier interrupted map's, now superseded
    out.print(f"map: {out_path}", highlight=False)


def _grid(
    caches: list[float], stripes: list[int], periods: list[float]
) -> list[tuple[float, int, float]]:
    """The map's points as (cache, stripe, period), in the order it lists them."""
    return [(c, s, p) for c in caches for s in stripes for p in periods]


@reproduce_app.command("ponce")
def reproduce_ponce(
    out_dir: ReportDirOpt,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            metavar="",
            help="Fewer jobs, loads, periods and cluster sizes: about 200 s of CPU in all, so "
            "about 2 minutes on two free cores and about 3 beside a busy process, longer "
            "beside more work (docs/reproduction.md says what it leaves out and what was "
            "measured).",
        ),
    ] = False,
    resume: ResumeOpt = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
) -> None:
    """Re-run the experiments behind ponce-hersch's numbers and figures (§3-§8): our
    Figures 3-12 and 14-16 (CSV and PNG each) and a report with the paper's value beside ours
    for every claim.

    Each run's result is kept in DIR/runs/ as it finishes, and a line says so on stderr (a
    bar on a terminal). A `--quick` run says so at the top of its report and under its
    table. Interrupted (Ctrl-C, SIGTERM), the command keeps what finished;
    `--resume` goes on from there.
    """
    from datasched.studies.ponce.figures import write_figure
    from datasched.studies.ponce.reproduce import run_ponce, write_report
    from datasched.studies.report import quick_note

    check_out_dir(out_dir)
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    store = kept_runs(out_dir, {"study": "ponce", "quick": quick}, resume=resume)
    with keeping_runs(store), run_progress() as say, cluster_errors():
        claims, results = run_ponce(
            quick=quick, processes=processes, scheduler=target, progress=say, store=store
        )
    figs = {}
    for result in results:
        with user_errors():
            figs[result.spec.key] = write_figure(result, out_dir / "figures")
    shown = [(f.spec.title, f.png_path) for f in figs.values() if f.png_path is not None]
    with user_errors():
        _, md_path = write_report(
            claims,
            out_dir,
            title="Reproduction of ponce-hersch",
            figures=shown,
            command="datasched reproduce ponce",
            quick=quick,
        )
    table = claims_table(f"ponce-hersch: paper vs datasched{QUICK_TITLE if quick else ''}", claims)
    out.print(table)
    if quick:
        out.print(quick_note("datasched reproduce ponce", markdown=False), highlight=False)
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
            help="Print one JSON object (every run, the CSV and plot paths, and whether it "
            "is partial) and nothing else.",
        ),
    ] = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
) -> None:
    """A short tour (well under a minute): the three first-come-first-served policies of
    ponce-hersch (processing farm, job splitting, cache-oriented splitting with 100 GB caches)
    at four loads on the paper's 10-node cluster, as a table, a CSV and a plot.

    Interrupted (Ctrl-C, SIGTERM), it stops its worker processes, writes the runs that
    finished to sweep.partial.csv and sweep.partial.png (as `sweep` does), prints them in a
    table marked PARTIAL (`"partial": true` in `--json`) and exits with status 130."""
    check_out_dir(out_dir)
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=DEMO_JOBS, cache_gb=100.0)
        for p in DEMO_POLICIES
        for load in DEMO_LOADS
    ]
    title = f"{DEMO_JOBS} jobs per run, 10 nodes, 100 GB caches"
    finished: dict[int, Summary] = {}
    stopped = ""
    try:
        with sigterm_interrupts():
            results = run_all(
                configs, processes=processes, scheduler=target, quiet=as_json, finished=finished
            )
        with user_errors():
            written: tuple[Path, Path] | None = write_sweep(results, out_dir)
    except KeyboardInterrupt:
        results = [finished[i] for i in sorted(finished)]
        stopped, written = keep_partial_sweep(results, len(configs), out_dir)
        if written is None and not as_json:
            raise typer.Exit(130) from None
    if as_json:
        print_json(
            {
                "runs": [jsonable(r.to_dict()) for r in results],
                "csv": None if written is None else str(written[0]),
                "plot": None if written is None else str(written[1]),
                "partial": bool(stopped),
            }
        )
    else:
        assert written is not None
        if stopped:
            title = f"PARTIAL ({stopped}): {title}"
        out.print(summary_table(results, title=title))
        if stopped:
            out.print(f"partial: {stopped}; the other runs were not made", highlight=False)
        out.print(f"plot: {written[1]}", highlight=False)
    if stopped:
        raise typer.Exit(130)  # as a shell reports a command ended by Ctrl-C
