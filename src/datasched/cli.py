"""The ``datasched`` command line: simulate policies, find maximal loads, sweep, reproduce.

Every command explains itself with ``--help``. Bad input gets one line on stderr naming the
option or field and the reason, exit code 2, and nothing is written.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from datasched import __version__
from datasched.core.model import Pipelining
from datasched.policies import UnknownPolicyError, available, get_policy
from datasched.sim.experiment import ConfigError, SimConfig, find_max_load, simulate
from datasched.sim.metrics import Summary
from datasched.sim.workload import (
    TraceError,
    WorkloadError,
    WorkloadSpec,
    generate,
    load_trace,
    save_trace,
)

__all__ = ["app"]

app = typer.Typer(
    help=(
        "datasched schedules data-intensive analysis jobs on clusters whose nodes cache data "
        "from slow central storage. These commands run the discrete-event simulator: compare "
        "scheduling policies, find the load a cluster sustains, and reproduce the published "
        "results."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(help="Make and inspect job traces (CSV files of submitted jobs).")
reproduce_app = typer.Typer(help="Reproduce a paper's numbers and write a report.")
app.add_typer(trace_app, name="trace")
app.add_typer(reproduce_app, name="reproduce")

out = Console()
err = Console(stderr=True)

# Config field -> the option that sets it, for error messages.
OPTION_OF = {
    "load_jobs_per_h": "--load",
    "n_nodes": "--nodes",
    "n_jobs": "--jobs",
    "cache_gb": "--cache-gb",
    "seed": "--seed",
    "min_subjob_events": "--min-subjob",
    "warmup_fraction": "--warmup",
    "cooldown_fraction": "--warmup",
    "max_backlog": "--max-backlog",
}


def fail(message: str) -> NoReturn:
    """One error line, exit code 2."""
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad-input exceptions into one line naming the option or field."""
    try:
        yield
    except (ConfigError, WorkloadError) as exc:
        fail(f"{OPTION_OF.get(exc.field, exc.field)}: {exc.reason}")
    except UnknownPolicyError as exc:
        fail(f"--policy: {exc}")
    except TraceError as exc:
        fail(str(exc))


def version_callback(value: bool) -> None:
    if value:
        out.print(f"datasched {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Cache-aware scheduling of data-intensive analysis jobs."""


# -- shared options ----------------------------------------------------------------------------

PolicyOpt = Annotated[
    str, typer.Option("--policy", "-p", help="Scheduling policy (see `datasched policies`).")
]
NodesOpt = Annotated[int, typer.Option("--nodes", help="Worker nodes in the cluster.")]
CacheOpt = Annotated[
    float, typer.Option("--cache-gb", help="Disk cache per node, in GB (1 GB = 1e9 bytes).")
]
LoadOpt = Annotated[float, typer.Option("--load", help="Mean job arrivals per hour (Poisson).")]
JobsOpt = Annotated[int, typer.Option("--jobs", help="Jobs to simulate (warm-up included).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed of the workload.")]
PipelineOpt = Annotated[
    Pipelining,
    typer.Option(
        "--pipeline",
        help="Which I/O overlaps computation: none, tertiary (tape/central storage reads), "
        "disk (cache reads) or both.",
    ),
]
WarmupOpt = Annotated[
    float,
    typer.Option("--warmup", help="Fraction of the jobs left out as warm-up (caches filling)."),
]
MinSubjobOpt = Annotated[
    int, typer.Option("--min-subjob", help="Smallest subjob, in events (the paper uses 10).")
]
TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Replay this trace CSV (job_id,submit_s,start_event,n_events[,user]) instead of "
        "generating jobs; --load and --jobs are then not used.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object, nothing else.")]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-P",
        help="A policy parameter as NAME=VALUE, repeatable (e.g. -P fairness_h=24 for "
        "out-of-order, -P fill_duplicates=false for cache-splitting).",
    ),
]


def parse_params(policy: str, items: list[str] | None) -> dict[str, Any]:
    """``NAME=VALUE`` pairs checked against the policy's constructor."""
    import inspect

    known = inspect.signature(get_policy(policy)).parameters
    params: dict[str, Any] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            fail(f"--param: expected NAME=VALUE, got {item!r}")
        if name not in known:
            names = ", ".join(known) or "none"
            fail(f"--param: policy {policy!r} has no parameter {name!r} (it has: {names})")
        value: Any
        low = text.strip().lower()
        if low in ("true", "yes", "on", "false", "no", "off"):
            value = low in ("true", "yes", "on")
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    fail(f"--param: {name}: expected a number or true/false, got {text!r}")
        params[name] = value
    try:
        get_policy(policy)(**params)
    except ValueError as exc:
        fail(f"--param: {exc}")
    return params


def make_config(
    policy: str,
    nodes: int,
    cache_gb: float,
    load: float,
    jobs: int,
    seed: int,
    pipeline: Pipelining,
    warmup: float,
    min_subjob: int,
    trace: Path | None,
    params: list[str] | None = None,
) -> SimConfig:
    policy_params = parse_params(policy, params)
    if trace is not None and not trace.is_file():
        fail(f"--trace: {trace}: no such file")
    config = SimConfig(
        policy=policy,
        policy_params=policy_params,
        n_nodes=nodes,
        cache_gb=cache_gb,
        load_jobs_per_h=load,
        n_jobs=jobs,
        seed=seed,
        pipelining=pipeline,
        warmup_fraction=warmup,
        min_subjob_events=min_subjob,
        trace=trace,
    )
    if trace is not None:
        load_trace(trace)  # validate before running anything
    return config


def hours(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds / 3600:.2f}h"


def summary_table(rows: list[Summary], title: str = "") -> Table:
    """The figures of each run, one row per run (fits an 80-column terminal: the pipeline
    column shows only when some run pipelines)."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    piped = any(s.pipeline != "none" for s in rows)
    columns = ["policy", "cache", *(["pipeline"] if piped else []), "load/h", "speedup"]
    columns += ["wait", "p95", "hits", "busy", "over"]
    for name in columns:
        table.add_column(name, justify="left" if name == "policy" else "right")
    for s in rows:
        cells = [s.policy, f"{s.cache_gb:g}GB", *([s.pipeline] if piped else [])]
        cells += [
            f"{s.load_jobs_per_h:.3g}",
            f"{s.mean_speedup:.2f}",
            hours(s.mean_wait_s),
            hours(s.p95_wait_s),
            f"{s.cache_hit_ratio:.0%}",
            f"{s.utilization:.0%}",
            "[red]yes[/red]" if s.overloaded else "no",
        ]
        table.add_row(*cells)
    return table


def print_json(obj: Any) -> None:
    print(json.dumps(obj, allow_nan=False, default=float))


# -- commands ----------------------------------------------------------------------------------


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
    param: ParamOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate one policy at one load and print its steady-state figures.

    Waiting time runs from submission to the start of a job's first part; speedup is the
    job's time alone on one node without cache (0.8 s per event) over its processing time.
    The paper's parameters are the defaults (10 nodes, 600 KB and 0.2 s CPU per event,
    tertiary storage at 1 MB/s per node, disks at 10 MB/s).
    """
    with user_errors():
        config = make_config(
            policy, nodes, cache_gb, load, jobs, seed, pipeline, warmup, min_subjob, trace, param
        )
        if as_json:
            summary, _ = simulate(config)
        else:
            with err.status(f"simulating {jobs} jobs under {policy} ..."):
                summary, _ = simulate(config)
    if as_json:
        print_json(_finite(summary.to_dict()))
        return
    out.print(summary_table([summary]))
    out.print(
        f"{summary.events_handled} scheduler events in {summary.wall_s:.2f} s of wall-clock time"
    )


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """NaN (no job measured) becomes null in JSON."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


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
    param: ParamOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find the largest load (jobs/h) the policy sustains before its queues grow without end.

    Bisection over the load; every probe replays the same jobs (same sizes and start points,
    arrivals scaled), so probes differ only in load. Loads within a few per cent of the true
    limit cannot be told apart by a finite run.
    """
    probes: list[dict[str, Any]] = []

    def on_step(load: float, overloaded: bool) -> None:
        probes.append({"load_jobs_per_h": load, "overloaded": overloaded})
        if not as_json:
            verdict = "[red]overloaded[/red]" if overloaded else "[green]sustained[/green]"
            err.print(f"  {load:7.3f} jobs/h: {verdict}")

    with user_errors():
        config = make_config(
            policy, nodes, cache_gb, 1.0, jobs, seed, pipeline, warmup, min_subjob, None, param
        )
        result = find_max_load(config, on_step=on_step)
    if as_json:
        print_json(
            {
                "policy": policy,
                "max_load_jobs_per_h": result,
                "n_nodes": nodes,
                "cache_gb": cache_gb,
                "pipeline": pipeline.value,
                "n_jobs": jobs,
                "seed": seed,
                "probes": probes,
            }
        )
        return
    out.print(f"maximal sustainable load of {policy}: [bold]{result:.3f} jobs/h[/bold]")


def parse_floats(text: str, option: str) -> list[float]:
    """``0.1,0.2,0.5`` or ``START:STOP:COUNT`` (evenly spaced, both ends included)."""
    try:
        if ":" in text:
            start_s, stop_s, count_s = text.split(":")
            start, stop, count = float(start_s), float(stop_s), int(count_s)
            if count < 1:
                raise ValueError
            if count == 1:
                return [start]
            return [start + (stop - start) * i / (count - 1) for i in range(count)]
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{option}: expected a comma list like 0.1,0.5 or START:STOP:COUNT, got {text!r}")
    if not values:
        fail(f"{option}: no values given")
    return values


@app.command()
def sweep(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for sweep.csv and sweep.png.")],
    policies: Annotated[
        str, typer.Option("--policies", help="Comma list of policies.")
    ] = "farm,splitting,cache-splitting",
    loads: Annotated[
        str,
        typer.Option("--loads", help="Loads in jobs/h: 0.1,0.3,0.5 or START:STOP:COUNT."),
    ] = "0.1:1.5:8",
    cache_gb: Annotated[
        str,
        typer.Option("--cache-gb", help="Cache per node in GB; a comma list gives a series each."),
    ] = "100",
    nodes: NodesOpt = 10,
    jobs: JobsOpt = 1000,
    seed: SeedOpt = 0,
    pipeline: PipelineOpt = Pipelining.NONE,
) -> None:
    """Simulate every policy (and cache size) at every load: a table, a CSV and a plot of
    mean speedup and mean waiting time against load (like Figure 3 of ponce-hersch).

    Caches matter only to cache-aware policies, so farm and splitting run once per load.
    """
    load_list = parse_floats(loads, "--loads")
    cache_list = parse_floats(cache_gb, "--cache-gb")
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        fail("--policies: no policy given")
    configs: list[SimConfig] = []
    with user_errors():
        for name in names:
            cls = get_policy(name)
            caches = cache_list if cls.cache_fill or cls.peer_reads else [cache_list[0]]
            for cache in caches:
                for load in load_list:
                    configs.append(
                        make_config(name, nodes, cache, load, jobs, seed, pipeline, 0.2, 10, None)
                    )
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out: {out_dir} exists and is not a directory")
    results: list[Summary] = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    with progress:
        task = progress.add_task("simulating", total=len(configs))
        for config in configs:
            label = f"{config.policy} {config.cache_gb:g} GB @ {config.load_jobs_per_h:.3g}/h"
            progress.update(task, description=label)
            summary, _ = simulate(config)
            results.append(summary)
            progress.advance(task)
    csv_path, png_path = write_sweep(results, out_dir)
    out.print(summary_table(results))
    out.print(f"CSV:  {csv_path}\nplot: {png_path}")


def write_sweep(results: list[Summary], out_dir: Path) -> tuple[Path, Path]:
    """Write sweep.csv and sweep.png into ``out_dir`` via a temporary directory beside it."""
    from datasched.sim.plots import plot_sweep

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        with (tmp / "sweep.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(results[0].to_dict()))
            writer.writeheader()
            for s in results:
                writer.writerow(s.to_dict())
        plot_sweep(results, tmp / "sweep.png")
        out_dir.mkdir(exist_ok=True)
        for name in ("sweep.csv", "sweep.png"):
            os.replace(tmp / name, out_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir / "sweep.csv", out_dir / "sweep.png"


@app.command()
def scale(
    policy: PolicyOpt = "farm",
    nodes: Annotated[
        str, typer.Option("--nodes", help="Cluster sizes, comma list (e.g. 10,100,1000).")
    ] = "10,100",
    load: Annotated[
        float, typer.Option("--load", help="Load of a 10-node cluster, jobs/h; grows with N.")
    ] = 0.5,
    jobs: JobsOpt = 200,
    cache_gb: CacheOpt = 100.0,
    param: ParamOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the master's work as the cluster grows (ponce-hersch §8, Figure 16): load and
    data space proportional to the number of nodes, scheduler time per job, and the master's
    load (scheduler seconds per simulated second; 1.0 = one core fully busy)."""
    from datasched.sim.scale import scale_point

    sizes = [int(v) for v in parse_floats(nodes, "--nodes")]
    with user_errors():
        base = make_config(
            policy, 10, cache_gb, load, jobs, 0, Pipelining.NONE, 0.2, 10, None, param
        )
        for n in sizes:
            if n < 1:
                raise ConfigError("n_nodes", f"must be a positive number, got {n}")
        points = []
        for n in sizes:
            if not as_json:
                err.print(f"  {n} nodes ...")
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


@app.command()
def policies() -> None:
    """List the scheduling policies, with the paper section each implements."""
    table = Table(title="scheduling policies")
    table.add_column("name")
    table.add_column("source")
    table.add_column("what it does")
    for name, cls in available().items():
        table.add_row(name, cls.section, cls.summary)
    out.print(table)


@trace_app.command("generate")
def trace_generate(
    out_file: Annotated[Path, typer.Option("--out", help="CSV file to write.")],
    load: LoadOpt = 1.0,
    jobs: JobsOpt = 1000,
    seed: SeedOpt = 0,
) -> None:
    """Write a synthetic job trace with the paper's workload (Erlang-4 sizes of mean 40,000
    events, two hot regions holding 10 % of the data and 50 % of the start points)."""
    with user_errors():
        records = generate(WorkloadSpec(load_jobs_per_h=load, n_jobs=jobs, seed=seed))
    if not out_file.parent.is_dir():
        fail(f"--out: directory {out_file.parent} does not exist")
    save_trace(records, out_file)
    out.print(f"wrote {len(records)} jobs to {out_file}")


@trace_app.command("show")
def trace_show(
    path: Annotated[Path, typer.Argument(help="Trace CSV to read.")],
) -> None:
    """Check a trace and summarise it: jobs, time span, mean size, arrival rate."""
    with user_errors():
        records = load_trace(path)
    span = records[-1].submit_s - records[0].submit_s
    mean = sum(r.n_events for r in records) / len(records)
    rate = 3600 * (len(records) - 1) / span if span > 0 else float("nan")
    out.print(f"{len(records)} jobs over {span / 3600:.1f} h ({rate:.3g} jobs/h)")
    out.print(
        f"mean size {mean:,.0f} events; "
        f"data space used up to event {max(r.stop_event for r in records):,}"
    )


@reproduce_app.command("ponce")
def reproduce_ponce(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for report.md and claims.csv.")],
    quick: Annotated[
        bool, typer.Option("--quick", help="Fewer jobs per run (about 30 s).")
    ] = False,
) -> None:
    """Re-run the experiments behind ponce-hersch's numbers (§3, §7) and write a report with
    the paper's value beside ours for every claim."""
    from datasched.sim.reproduce import ponce_fcfs_claims, write_report

    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out: {out_dir} exists and is not a directory")
    with err.status("running the reproduction ...") as status:
        claims = ponce_fcfs_claims(quick=quick, progress=lambda m: status.update(m))
    _, md_path = write_report(claims, out_dir, title="Reproduction of ponce-hersch (FCFS policies)")
    table = Table(title="ponce-hersch: paper vs datasched")
    for col in ("claim", "paper", "ours", "agrees"):
        table.add_column(col)
    for c in claims:
        table.add_row(
            c.claim, f"{c.paper:g}", f"{c.ours:.3g}", "yes" if c.agrees else "[yellow]no[/yellow]"
        )
    out.print(table)
    out.print(f"report: {md_path}")


@app.command("demo-sim")
def demo_sim(
    out_dir: Annotated[Path, typer.Option("--out", help="Where the sweep CSV and plot go.")] = Path(
        "out/demo"
    ),
    as_json: JsonOpt = False,
) -> None:
    """A short tour: the three first-come-first-served policies of ponce-hersch at four loads
    on the paper's 10-node cluster, as a table and a plot (well under a minute)."""
    loads = [0.2, 0.5, 0.8, 1.1]
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=400, cache_gb=100.0)
        for p in ("farm", "splitting", "cache-splitting")
        for load in loads
    ]
    results: list[Summary] = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        disable=as_json,
    )
    with progress:
        task = progress.add_task("simulating", total=len(configs))
        for config in configs:
            results.append(simulate(config)[0])
            progress.advance(task)
    csv_path, png_path = write_sweep(results, out_dir)
    if as_json:
        print_json(
            {
                "runs": [_finite(r.to_dict()) for r in results],
                "csv": str(csv_path),
                "plot": str(png_path),
            }
        )
        return
    out.print(summary_table(results, title="400 jobs per run, 10 nodes, 100 GB caches"))
    out.print(f"plot: {png_path}")
