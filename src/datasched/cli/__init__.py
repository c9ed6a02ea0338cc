"""The ``datasched`` command line: simulate policies, find maximal loads, sweep, reproduce.

Every command explains itself with ``--help``. Bad input gets one line on stderr naming the
option (or the trace file's line and field) and the reason, exit code 2, no traceback, and
nothing is written: :func:`user_errors` turns the simulator's own errors into that line, and
:class:`RootGroup` does the same for the parser's (unknown option, value of the wrong type).
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import os
import secrets
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, fields
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from datasched import __version__
from datasched.core.model import Pipelining
from datasched.policies import UnknownPolicyError, available, get_policy
from datasched.sim.experiment import ConfigError, SimConfig, find_max_load, simulate
from datasched.sim.metrics import Summary
from datasched.sim.plots import plot_sweep, uses_cache
from datasched.sim.workload import (
    JobRecord,
    TraceError,
    WorkloadError,
    WorkloadSpec,
    generate,
    load_trace,
    save_trace,
)

__all__ = ["RootGroup", "app"]

out = Console()
err = Console(stderr=True)

# Config and workload field -> the option that sets it, for error messages.
OPTION_OF = {
    "policy": "--policy",
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


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one ``error:`` line on stderr and exit (2: bad input)."""
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors(**options: str) -> Iterator[None]:
    """Turn bad-input exceptions into one line naming the option (or trace line) and reason.

    ``options`` renames fields for one command (``load_jobs_per_h="--loads"`` in a sweep).
    """
    names = {**OPTION_OF, **options}
    try:
        yield
    except (ConfigError, WorkloadError) as exc:
        fail(f"{names.get(exc.field, exc.field)}: {exc.reason}")
    except UnknownPolicyError as exc:
        fail(f"{names['policy']}: {exc}")
    except TraceError as exc:
        fail(str(exc))
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        fail(f"{where}{exc.strerror or exc}", code=1)


def _usage_error_line(exc: Exception) -> str:
    """The parser's error as one line: ``--pipeline: 'x' is not one of ...``."""
    message = str(getattr(exc, "message", "") or "").removeprefix("Value error, ")
    param = getattr(exc, "param", None)
    if isinstance(exc, typer.BadParameter) and param is not None and message:
        names = [o for o in param.opts if o.startswith("--")] or list(param.opts)
        line = f"{names[0] if names else param.name}: {message}"
    else:
        line = str(exc.format_message())  # type: ignore[attr-defined]
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            line = f"{line.rstrip('.')} (see '{ctx.command_path} --help')"
    return " ".join(line.split())


class RootGroup(TyperGroup):
    """The root command: errors of the parser, too, are one ``error:`` line (exit code 2)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        except Exception as exc:
            # Click's exceptions (vendored by typer): a message and an exit code. Anything
            # else is a bug and keeps its traceback.
            exit_code = getattr(exc, "exit_code", None)
            if not (hasattr(exc, "format_message") and isinstance(exit_code, int)):
                raise
            if type(exc).__name__ != "NoArgsIsHelpError":  # its help is already printed
                err.print(
                    f"error: {_usage_error_line(exc)}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            sys.exit(exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=RootGroup,
    help=(
        "Schedule analysis jobs that read large event datasets on a cluster whose nodes "
        "cache data from slow central (tape) storage. Simulate: compare scheduling policies, "
        "find the load a cluster sustains, sweep loads and cache sizes, reproduce the "
        "published results (ponce-hersch). Run: the same policies drive real analyses on "
        "Dask workers with disk caches (run, demo)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # paragraphs are re-wrapped to the terminal
)
trace_app = typer.Typer(
    help="Make and inspect job traces (CSV files, one submitted job per row).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
reproduce_app = typer.Typer(
    help="Reproduce a paper's numbers and write a report with its values beside ours.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(trace_app, name="trace")
app.add_typer(reproduce_app, name="reproduce")


def version_callback(value: bool) -> None:
    """``--version``: print it and stop."""
    if value:
        out.print(f"datasched {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=version_callback,
            is_eager=True,
            metavar="",
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Cache-aware scheduling of data-intensive analysis jobs (simulator)."""


# -- shared options ----------------------------------------------------------------------------

PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy", "-p", metavar="NAME", help="Scheduling policy; `datasched policies` lists them."
    ),
]
NodesOpt = Annotated[
    int,
    typer.Option("--nodes", metavar="N", help="Worker nodes in the cluster (one CPU each)."),
]
CacheOpt = Annotated[
    float,
    typer.Option(
        "--cache-gb",
        metavar="GB",
        help="Disk cache per node, in GB (10^9 bytes); 0 for none. Used by cache-aware policies.",
    ),
]
LoadOpt = Annotated[
    float,
    typer.Option(
        "--load", metavar="JOBS/H", help="Mean job arrival rate, in jobs per hour (Poisson)."
    ),
]
JobsOpt = Annotated[
    int,
    typer.Option(
        "--jobs",
        metavar="N",
        help="Jobs submitted, warm-up included; more jobs give steadier figures, slower runs.",
    ),
]
SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed", metavar="INT", help="Random seed of the workload: same seed, same jobs."
    ),
]
PipelineOpt = Annotated[
    Pipelining,
    typer.Option(
        "--pipeline",
        help="Which reads overlap computation: none, tertiary (central storage), disk (cache) "
        "or both (ponce-hersch §7).",
    ),
]
WarmupOpt = Annotated[
    float,
    typer.Option(
        "--warmup",
        metavar="FRACTION",
        help="Fraction (0 to 1) of the first jobs not measured, while the caches fill.",
    ),
]
MinSubjobOpt = Annotated[
    int,
    typer.Option(
        "--min-subjob",
        metavar="EVENTS",
        help="Smallest part a job is split into, in events (the paper uses 10).",
    ),
]
TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        metavar="CSV",
        help="Replay this trace (columns job_id, submit_s, start_event, n_events and "
        "optionally user) instead of generating jobs; --load and --jobs are then taken from "
        "the trace. Default: generate the paper's workload.",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", metavar="", help="Print one JSON object on stdout and nothing else there."
    ),
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-P",
        metavar="NAME=VALUE",
        help="A policy parameter, repeatable: e.g. `-P fairness_h=24` for out-of-order, "
        "`-P fill_duplicates=false` for cache-splitting. Default: the policy's own defaults.",
    ),
]


FairnessOpt = Annotated[
    float | None,
    typer.Option(
        "--fairness-h",
        metavar="HOURS",
        help="out-of-order: a job that has waited this many hours for uncached data runs on "
        "the next free node (the fairness bound of Table 3). Default: 48.",
    ),
]
ReplicateOpt = Annotated[
    int | None,
    typer.Option(
        "--replicate-after",
        metavar="N",
        help="out-of-order: turn replication on (ponce-hersch §4.2): data cached on another "
        "node is read from there, and copied into the reader's cache at its N-th remote read. "
        "Default: off.",
    ),
]
PeriodOpt = Annotated[
    float | None,
    typer.Option(
        "--period-h",
        metavar="HOURS",
        help="delayed: length of a period in hours; the jobs that arrive during a period are "
        "scheduled together at its end (Table 4). Default: 48.",
    ),
]
StripeOpt = Annotated[
    int | None,
    typer.Option(
        "--stripe-events",
        metavar="EVENTS",
        help="delayed: stripe size in events; uncached data is cut on common stripe points "
        "(Table 4). Default: 5000.",
    ),
]

POLICY_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "--fairness-h": ("fairness_h", {}),
    "--replicate-after": ("replicate_after", {"replication": True}),
    "--period-h": ("period_h", {}),
    "--stripe-events": ("stripe_events", {}),
}
"""Options for policy parameters: option -> (constructor parameter, parameters it implies)."""


def named_options(
    fairness_h: float | None,
    replicate_after: int | None,
    period_h: float | None,
    stripe_events: int | None,
) -> dict[str, Any]:
    """The policy options of a command, by option name (None: not given)."""
    return {
        "--fairness-h": fairness_h,
        "--replicate-after": replicate_after,
        "--period-h": period_h,
        "--stripe-events": stripe_events,
    }


def takes(policy: str, parameter: str) -> bool:
    """Whether the policy's constructor has this parameter."""
    return parameter in inspect.signature(get_policy(policy)).parameters


def check_named(named: Mapping[str, Any], policies: Sequence[str]) -> None:
    """In a sweep, each policy option given must be taken by at least one policy."""
    for option, value in named.items():
        parameter = POLICY_OPTIONS[option][0]
        if value is not None and not any(takes(p, parameter) for p in policies):
            listed = ", ".join(policies)
            fail(f"{option}: none of the policies ({listed}) takes it")


def parse_params(
    policy: str,
    items: list[str] | None,
    named: Mapping[str, Any] | None = None,
    *,
    strict: bool = True,
) -> dict[str, Any]:
    """The policy's parameters from its options (``named``: option -> value or None) and from
    ``-P NAME=VALUE`` pairs, checked against its constructor.

    With ``strict``, an option the policy does not take is an error; without (a sweep), it
    goes only to the policies that take it.
    """
    cls = get_policy(policy)
    known = inspect.signature(cls).parameters
    params: dict[str, Any] = {}
    option_of: dict[str, str] = {}
    for option, given in (named or {}).items():
        parameter, implied = POLICY_OPTIONS[option]
        if given is None:
            continue
        if parameter not in known:
            if strict:
                users = [n for n in available() if takes(n, parameter)]
                fail(
                    f"{option}: policy {policy!r} takes no such parameter "
                    f"(it is for {', '.join(users)})"
                )
            continue
        params.update(implied)
        params[parameter] = given
        option_of[parameter] = option
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
        if name == "performance_map":
            from datasched.sim.perfmap import load_map

            try:
                value = load_map(Path(text))
            except (OSError, ValueError) as exc:
                fail(f"--param: performance_map: {exc}")
        elif low in ("true", "yes", "on", "false", "no", "off"):
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
        option_of.pop(name, None)
    try:
        cls(**params)
    except ValueError as exc:
        # The policies say "name: reason"; name the option the user typed.
        name, _, reason = str(exc).partition(": ")
        fail(f"{option_of[name]}: {reason}" if name in option_of else f"--param: {exc}")
    return params


def trace_rate_jobs_per_h(records: Sequence[JobRecord]) -> float | None:
    """A trace's mean arrival rate, if it spans some time."""
    span = records[-1].submit_s - records[0].submit_s
    return 3600 * (len(records) - 1) / span if span > 0 else None


def make_config(
    policy: str,
    *,
    nodes: int,
    cache_gb: float,
    load: float,
    jobs: int,
    seed: int,
    pipeline: Pipelining,
    warmup: float,
    min_subjob: int,
    trace: Path | None = None,
    params: list[str] | None = None,
    named: Mapping[str, Any] | None = None,
    strict: bool = True,
) -> SimConfig:
    """A checked :class:`SimConfig` from the options (raises the errors :func:`user_errors`
    reports). A trace is read here, so a malformed one is reported before anything runs, and
    its own arrival rate and job count stand in for ``--load`` and ``--jobs``."""
    policy_params = parse_params(policy, params, named, strict=strict)
    if trace is not None:
        records = load_trace(trace)
        load = trace_rate_jobs_per_h(records) or load
        jobs = len(records)
    return SimConfig(
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


# -- output ------------------------------------------------------------------------------------


def hours(seconds: float) -> str:
    """Seconds as hours for a table: ``12.34 h``, ``< 0.01 h``, ``-`` (nothing measured)."""
    if math.isnan(seconds):
        return "-"
    if 0 < seconds < 36:
        return "< 0.01 h"
    return f"{seconds / 3600:.2f} h"


def size(n_bytes: float) -> str:
    """Bytes in decimal units, as the papers count them (1 GB = 10^9 bytes)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.0f} B"


def percent(ratio: float) -> str:
    return "-" if math.isnan(ratio) else f"{ratio:.1%}"


def summary_detail(s: Summary) -> Table:
    """One run, one figure per row, in the units an operator reads (fits 80 columns)."""
    pipe = "no pipelining" if s.pipeline == "none" else f"{s.pipeline} pipelining"
    title = (
        f"{s.policy} at {s.load_jobs_per_h:.3g} jobs/h: {s.n_nodes} nodes, "
        f"{s.cache_gb:g} GB cache each, {pipe}"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    rows = [
        ("jobs measured", f"{s.jobs_measured}", "warm-up and cool-down left out"),
        ("mean wait", hours(s.mean_wait_s), "submission to start of first part"),
    ]
    if not math.isclose(s.mean_wait_excl_delay_s, s.mean_wait_s, rel_tol=1e-9, abs_tol=1e-6):
        rows.append(
            (
                "mean wait after period",
                hours(s.mean_wait_excl_delay_s),
                "from the end of its period",
            )
        )
    rows += [
        ("median wait", hours(s.median_wait_s), ""),
        ("95th percentile wait", hours(s.p95_wait_s), ""),
        ("longest wait", hours(s.max_wait_s), ""),
        ("mean processing time", hours(s.mean_processing_s), "start of first part to end of last"),
        ("mean speedup", f"{s.mean_speedup:.2f}", "alone on one node, no cache = 1"),
        ("cache hits", percent(s.cache_hit_ratio), "events read from the node's cache"),
        ("peer reads", percent(s.peer_read_ratio), "events read from another node's cache"),
        ("tertiary reads", size(s.tertiary_bytes), "from central storage, measured jobs"),
        ("utilization", percent(s.utilization), "node time spent processing"),
        ("mean backlog", f"{s.mean_backlog:.1f} jobs", "in the system, seen at arrivals"),
        ("overloaded", "[red]yes[/red]" if s.overloaded else "no", "queues growing without end"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def summary_table(rows: Sequence[Summary], title: str = "") -> Table:
    """Many runs, one row each (fits an 80-column terminal: the pipeline column shows only
    when some run pipelines)."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    piped = any(s.pipeline != "none" for s in rows)
    columns = ["policy", "cache", *(["pipeline"] if piped else []), "jobs/h", "speedup"]
    columns += ["wait", "p95 wait", "hits", "busy", "over"]
    for name in columns:
        table.add_column(name, justify="left" if name == "policy" else "right")
    for s in rows:
        cache = f"{s.cache_gb:g} GB" if uses_cache(s.policy) else "-"
        cells = [s.policy, cache, *([s.pipeline] if piped else [])]
        load = s.load_jobs_per_h
        cells += [
            f"{load:.2f}" if load >= 0.1 else f"{load:.3g}",
            f"{s.mean_speedup:.2f}",
            hours(s.mean_wait_s),
            hours(s.p95_wait_s),
            f"{s.cache_hit_ratio:.0%}",
            f"{s.utilization:.0%}",
            "[red]yes[/red]" if s.overloaded else "no",
        ]
        table.add_row(*cells)
    return table


def jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """NaN (no job measured) becomes null: JSON has no NaN."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def print_json(obj: Any) -> None:
    """The one JSON document of a ``--json`` run, on stdout."""
    sys.stdout.write(json.dumps(obj, allow_nan=False) + "\n")


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
    as_json: JsonOpt = False,
) -> None:
    """Find the largest load (jobs/h) the cluster sustains under a policy before its queues
    grow without end.

    Bisection over the load; every probe replays the same jobs (same sizes and start points,
    arrivals scaled), so probes differ only in load. Each probe is printed on stderr as it
    finishes. Loads within a few per cent of the true limit cannot be told apart by a finite
    run: more `--jobs` narrow that down.
    """
    probes: list[dict[str, Any]] = []

    def on_step(load: float, overloaded: bool) -> None:
        probes.append({"load_jobs_per_h": load, "overloaded": overloaded})
        if not as_json:
            verdict = "[red]overloaded[/red]" if overloaded else "[green]ok[/green]"
            err.print(f"  probe {len(probes):2d}: {load:7.3f} jobs/h  {verdict}", highlight=False)

    with user_errors():
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
    result = find_max_load(config, on_step=on_step)
    if as_json:
        print_json(
            {
                "policy": policy,
                "max_load_jobs_per_h": result,
                "policy_params": dict(config.policy_params),
                "n_nodes": nodes,
                "cache_gb": cache_gb,
                "pipeline": pipeline.value,
                "n_jobs": jobs,
                "seed": seed,
                "warmup_fraction": config.warmup_fraction,
                "cooldown_fraction": config.cooldown_fraction,
                "min_subjob_events": config.min_subjob_events,
                "probes": probes,
            }
        )
        return
    where = f"{nodes} nodes, {cache_gb:g} GB cache each"
    out.print(
        f"maximal sustainable load of {policy} ({where}): [bold]{result:.3f} jobs/h[/bold]",
        highlight=False,
    )


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


def run_all(configs: Sequence[SimConfig], *, quiet: bool = False) -> list[Summary]:
    """Simulate each config in turn with a progress bar on stderr (none when ``quiet``)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
    )
    results: list[Summary] = []
    with progress:
        task = progress.add_task("simulating", total=len(configs))
        for config in configs:
            label = f"{config.policy} {config.cache_gb:g} GB @ {config.load_jobs_per_h:.3g}/h"
            progress.update(task, description=label)
            results.append(simulate(config)[0])
            progress.advance(task)
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
    results = run_all(configs)
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

        pmap = build_map(
            base, periods_h=periods, stripes=stripe_list, caches_gb=caches, on_point=done
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
) -> None:
    """Re-run the experiments behind ponce-hersch's numbers and figures (§3-§8): our
    Figures 3-12 and 14-16 (CSV and PNG each) and a report with the paper's value beside ours
    for every claim."""
    from datasched.sim.figures import figure_specs, run_figure, write_figure
    from datasched.sim.reproduce import ponce_fcfs_claims, ponce_policy_claims, write_report

    check_out_dir(out_dir)
    specs = figure_specs(quick=quick)
    figs = {}
    with err.status("running the reproduction ...") as status:
        claims = ponce_fcfs_claims(quick=quick, progress=lambda m: status.update(m))
        for spec in specs:
            result = run_figure(spec, quick=quick, progress=lambda m: status.update(m))
            with user_errors():
                figs[spec.key] = write_figure(result, out_dir / "figures")
        claims += ponce_policy_claims(figs, quick=quick, progress=lambda m: status.update(m))
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
) -> None:
    """A short tour (well under a minute): the three first-come-first-served policies of
    ponce-hersch (processing farm, job splitting, cache-oriented splitting with 100 GB caches)
    at four loads on the paper's 10-node cluster, as a table, a CSV and a plot."""
    check_out_dir(out_dir)
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=DEMO_JOBS, cache_gb=100.0)
        for p in DEMO_POLICIES
        for load in DEMO_LOADS
    ]
    results = run_all(configs, quiet=as_json)
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


# The runtime's commands (run, demo-data, demo) live in their own module; they are registered
# last because they use the helpers above.
from datasched.cli import runtime as _runtime  # noqa: E402

_runtime.register(app)
