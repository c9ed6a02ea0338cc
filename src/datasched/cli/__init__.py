"""The ``datasched`` command line: simulate policies, find maximal loads, sweep, reproduce.

Every command explains itself with ``--help``. Bad input gets one line on stderr naming the
option (or the trace file's line and field) and the reason, exit code 2, no traceback, and
nothing is written: :func:`user_errors` turns the simulator's own errors into that line, and
:class:`RootGroup` does the same for the parser's (unknown option, value of the wrong type).
"""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from datasched import __version__
from datasched.core.model import Pipelining
from datasched.policies import UnknownPolicyError, available, get_policy
from datasched.sim.experiment import ConfigError, SimConfig
from datasched.sim.metrics import Summary
from datasched.sim.parallel import ClusterError, check_scheduler, usable_cores
from datasched.sim.plots import uses_cache
from datasched.sim.workload import JobRecord, TraceError, WorkloadError, load_trace

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


ProcessesOpt = Annotated[
    int | None,
    typer.Option(
        "--processes",
        "-j",
        metavar="N",
        help="Simulations run side by side in this many processes; the results are the same "
        f"for any number. Default: one per core this command may use ({usable_cores()} here). "
        "Not with --scheduler.",
        show_default=False,
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDR",
        help="Run the simulations on the workers of an existing Dask cluster, the one whose "
        "scheduler is at ADDR (tcp://HOST:PORT), instead of in local processes; the results "
        "are the same. The workers need datasched installed (this version). Not with "
        "--processes: the cluster's workers decide how many run at once.",
        show_default=False,
    ),
]


def processes_or_default(processes: int | None) -> int:
    """``--processes`` as given (checked), or one per usable core."""
    if processes is None:
        return usable_cores()
    if processes < 1:
        fail(f"--processes: must be at least 1, got {processes}")
    return processes


@contextmanager
def cluster_errors() -> Iterator[None]:
    """A Dask cluster lost during the runs (``--scheduler``): one line, exit code 1."""
    try:
        yield
    except ClusterError as exc:
        fail(f"--scheduler: {exc.reason}", code=1)


def where_to_run(processes: int | None, scheduler: str | None) -> tuple[int, str | None]:
    """``--processes`` and ``--scheduler`` checked: ``(processes, scheduler)`` to run with.

    Without ``--scheduler``, :func:`processes_or_default`. With it, the scheduler must answer
    now (within a few seconds), so that a wrong address is one error line before anything
    runs; ``--processes`` beside it is refused rather than silently ignored.
    """
    if scheduler is None:
        return processes_or_default(processes), None
    if processes is not None:
        fail(
            "--processes: not with --scheduler (the cluster's workers decide how many "
            "simulations run at once)"
        )
    try:
        workers = check_scheduler(scheduler)
    except ClusterError as exc:
        fail(f"--scheduler: {exc.reason}")
    if workers == 0:
        err.print(
            f"note: the Dask cluster at {scheduler} has no workers yet; the simulations wait "
            "for some to join",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return 1, scheduler


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


# The commands live in their own modules, registered last because they use the helpers above:
# the simulator's (cli/sim.py, by decorators) and the runtime's (cli/runtime.py).
from datasched.cli import runtime as _runtime  # noqa: E402
from datasched.cli import sim as _sim  # noqa: E402, F401

_runtime.register(app)
