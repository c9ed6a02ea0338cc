"""Options the commands share, and the policies' own options, built from what each policy
declares (:class:`~datasched.core.policy.Param`): nothing here names a policy.

A policy parameter can be given two ways: ``-P NAME=VALUE`` (any parameter of the chosen
policy) or its named option (``--fairness-h 24``), which :func:`with_policy_options` adds to a
command for every declared parameter that asks for one. Values are parsed and checked by the
declaration, so a bad one is reported as ``--fairness-h: must be above 0, got -1``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from datasched.cli.common import fail, given
from datasched.core.model import Pipelining
from datasched.core.policy import Param, ParamError
from datasched.policies import available, build_policy, get_policy, policy_options
from datasched.sim.experiment import SimConfig
from datasched.sim.parallel import usable_cores
from datasched.sim.workload import JobRecord, load_trace

__all__ = [
    "QUICK_TITLE",
    "check_named",
    "jobqueue_spec",
    "make_config",
    "policy_params_of",
    "refuse_overridden",
    "tls_files_of",
    "trace_rate_jobs_per_h",
    "with_policy_options",
]

F = TypeVar("F", bound=Callable[..., Any])

PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy", "-p", metavar="NAME", help="Scheduling policy; `datasched policies` lists them."
    ),
]
NodesOpt = Annotated[
    int,
    typer.Option("--nodes", metavar="N", help="Worker nodes in the cluster."),
]
SlotsOpt = Annotated[
    int,
    typer.Option(
        "--slots",
        metavar="N",
        help="Processing slots per node (CPUs); they share the node's cache and its link to "
        "central storage. The paper's nodes have one.",
    ),
]
FileGbOpt = Annotated[
    float,
    typer.Option(
        "--file-gb",
        metavar="GB",
        help="Cut the data space into files of this size, cached whole (as real ROOT files "
        "are: a file read from central storage is fetched whole first). 0: the paper's model, "
        "where any event range may be cached.",
    ),
]
MtbfOpt = Annotated[
    float | None,
    typer.Option(
        "--node-mtbf-h",
        metavar="HOURS",
        help="Nodes fail after an exponential time of this mean; their running work is given "
        "back and done elsewhere. Default: no failures.",
        show_default=False,
    ),
]
RepairOpt = Annotated[
    float,
    typer.Option(
        "--node-repair-h",
        metavar="HOURS",
        help="A failed node is back after this long, its cache empty (only with --node-mtbf-h).",
    ),
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
        metavar="MODE",
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
        "optionally user) instead of generating jobs; its arrivals and rows give the load "
        "and the jobs, so --load, --jobs and --seed (but with --node-mtbf-h) are refused "
        "beside it. Default: generate the paper's workload.",
    ),
]
QUICK_TITLE = " (quick run: reduced sizes)"
"""Ends the title of a ``reproduce --quick`` command's table of claims."""
ReportDirOpt = Annotated[
    Path,
    typer.Option("--out", metavar="DIR", help="Directory for report.md, claims.csv and figures/."),
]
"""``--out`` of every ``reproduce`` command."""
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        metavar="",
        help="Go on from an interrupted run into the same --out: the runs it finished "
        "(kept in DIR/runs/) are read back, not run again.",
    ),
]
"""``--resume`` of every ``reproduce`` command (:func:`~datasched.cli.common.kept_runs`)."""
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", metavar="", help="Print one JSON object on stdout and nothing else there."
    ),
]
TraceLogOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace-log",
        metavar="FILE",
        help="Write the scheduler's trace here as JSON lines (replaced if there): each event "
        "with its stimulus id, each change of a subjob's state, each action with the id of "
        "the event that caused it. Read it with `datasched trace story FILE --job N`.",
    ),
]
ReplicateHotOpt = Annotated[
    int | None,
    typer.Option(
        "--replicate-hot",
        metavar="JOBS",
        help="Beside the policy, copy a file into one more node cache each time this many "
        "more jobs have read it (ranganathan-foster's Dataset Scheduler: data replication "
        "decoupled from job placement; up to 3 copies, 2 in flight, only into free cache "
        "room, to the least loaded node). Default: off.",
        show_default=False,
    ),
]
"""``--replicate-hot`` of ``datasched sim`` and ``datasched run``."""
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-P",
        metavar="NAME=VALUE",
        help="A policy parameter, repeatable: e.g. `-P fairness_h=24` for out-of-order, "
        "`-P fill_duplicates=false` for cache-splitting; `datasched policies` lists every "
        "policy's parameters. Default: the policy's own defaults.",
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
        "scheduler is at ADDR (tcp://HOST:PORT, or tls://HOST:PORT with --tls-ca-file, "
        "--tls-cert, --tls-key), instead of in local processes; the results are the same. "
        "The workers need datasched installed (this version). Not with --processes: the "
        "cluster's workers decide how many run at once.",
        show_default=False,
    ),
]
TlsCaOpt = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca-file",
        metavar="PEM",
        help="With --scheduler tls://...: the CA certificate the cluster's certificates are "
        "signed by.",
        show_default=False,
        rich_help_panel="TLS (an existing cluster)",
    ),
]
TlsCertOpt = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        metavar="PEM",
        help="With --scheduler tls://...: this client's certificate, signed by that CA.",
        show_default=False,
        rich_help_panel="TLS (an existing cluster)",
    ),
]
TlsKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        metavar="PEM",
        help="With --scheduler tls://...: the certificate's private key (unencrypted; keep "
        "it readable only by you).",
        show_default=False,
        rich_help_panel="TLS (an existing cluster)",
    ),
]
"""``--tls-ca-file``, ``--tls-cert``, ``--tls-key``: every command with ``--scheduler``;
checked by :func:`tls_files_of`."""


def tls_files_of(
    scheduler: str | None, ca: Path | None, cert: Path | None, key: Path | None
) -> Any:
    """The TLS files for ``--scheduler`` (a :class:`~datasched.runtime.tls.TlsFiles`), or
    ``None`` for a ``tcp://`` address or none; a bad combination, or a file that cannot be
    read or used, exits with one line naming the option (docs/runtime.md, "A closed
    cluster")."""
    from datasched.runtime.tls import TlsError, check_tls_options

    try:
        return check_tls_options(scheduler, ca, cert, key)
    except TlsError as exc:
        fail(str(exc))


JobqueueOpt = Annotated[
    str | None,
    typer.Option(
        "--jobqueue",
        metavar="KIND",
        help="Start the workers as batch jobs through dask-jobqueue, one worker a job: "
        "slurm, htcondor, pbs or lsf (the submit command must be on PATH). Not with "
        "--scheduler. See docs/batch.md.",
        show_default=False,
    ),
]
JobqueueArgsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--jobqueue-args",
        metavar="KEY=VALUE ...",
        help="The batch jobs' settings with --jobqueue, e.g. \"queue=debug account=physics "
        "walltime=01:00:00 cores=2 memory=4GiB\" (repeatable; dask-jobqueue's names, such as "
        "job_extra_directives, plus host, wait_s and worker_cache_dir).",
        show_default=False,
    ),
]


def jobqueue_spec(kind: str | None, args: Sequence[str] | None, scheduler: str | None) -> Any:
    """``--jobqueue`` and ``--jobqueue-args`` checked (kind, keys and values, dask-jobqueue
    installed, the submit command on PATH), or ``None`` without ``--jobqueue``; a bad one
    exits with one line naming it. Returns a :class:`~datasched.runtime.batch.JobqueueSpec`."""
    if kind is None:
        if args:
            fail("--jobqueue-args: needs --jobqueue (slurm, htcondor, pbs or lsf)")
        return None
    if scheduler is not None:
        fail(
            "--jobqueue: not with --scheduler (the batch jobs' workers join a scheduler "
            "started here)"
        )
    from datasched.runtime.batch import (
        JobqueueError,
        check_submit_command,
        parse_jobqueue_args,
        require_jobqueue,
    )

    try:
        spec = parse_jobqueue_args(kind, args or ())
        require_jobqueue()
        check_submit_command(spec)
    except JobqueueError as exc:
        fail(str(exc))
    return spec


# -- the policies' own options ------------------------------------------------------------

_PREFIX = "policy_option_"


def _takers(name: str) -> list[str]:
    """The policies declaring a parameter of this name."""
    return [n for n, cls in available().items() if any(p.name == name for p in cls.params)]


def _metavar(param: Param) -> str:
    if param.kind is object:
        return "FILE"
    return (param.unit or param.kind.__name__).upper()


def _option_help(param: Param) -> str:
    users = ", ".join(_takers(param.name))
    default = "off" if param.default is None else param.default
    if isinstance(default, bool):
        default = "true" if default else "false"
    return f"{users}: {param.help}. Default: {default}."


def with_policy_options(command: F) -> F:
    """Give ``command`` a named option for every declared policy parameter that asks for
    one; the ones given reach it as ``named`` (parameter name -> text as typed)."""
    declared = policy_options()
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "named"]
    extra = [
        inspect.Parameter(
            _PREFIX + param.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                str | None,
                typer.Option(
                    param.flag,
                    metavar=_metavar(param),
                    help=_option_help(param),
                    show_default=False,
                    rich_help_panel="Policy options",
                ),
            ],
        )
        for param in declared.values()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        named = {}
        for name in declared:
            value = kwargs.pop(_PREFIX + name)
            if value is not None:
                named[name] = value
        return command(**kwargs, named=named)

    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in kept] + extra
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper  # type: ignore[return-value]


def policy_params_of(
    policy: str,
    items: Sequence[str] | None,
    named: Mapping[str, str] | None = None,
    *,
    strict: bool = True,
) -> dict[str, Any]:
    """The policy's parameters from its named options (``named``: name -> text) and from
    ``-P NAME=VALUE`` pairs, parsed and checked by its declaration (the policy is built once
    to check rules across parameters).

    With ``strict``, a named option the policy does not take is an error; without (a sweep),
    it goes only to the policies that take it.
    """
    declared = {p.name: p for p in get_policy(policy).params}
    params: dict[str, Any] = {}
    flag_of: dict[str, str] = {}
    typed: dict[str, str] = {}
    """Parameter -> how it was given (``--fairness-h`` or ``-P fairness_h=24``)."""
    for name, text in (named or {}).items():
        param = declared.get(name)
        flag = "--" + name.replace("_", "-")
        if param is None:
            if strict:
                fail(
                    f"{flag}: policy {policy!r} takes no such parameter "
                    f"(it is for {', '.join(_takers(name))})"
                )
            continue
        try:
            params[name] = param.from_text(policy, text)
        except ParamError as exc:
            fail(f"{flag}: {exc.reason}")
        flag_of[name] = flag
        typed[name] = flag
    for item in items or []:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            fail(f"--param: expected NAME=VALUE, got {item!r}")
        param = declared.get(name)
        if param is None:
            has = ", ".join(declared) or "none"
            fail(f"-P {name}: policy {policy!r} has no such parameter (it has: {has})")
        if name in typed:  # the last would silently win
            fail(f"-P {name}: not with {typed[name]} (both set {name}; give it once)")
        try:
            params[name] = param.from_text(policy, text)
        except ParamError as exc:
            fail(f"-P {name}: {exc.reason}")
        typed[name] = f"-P {item.strip()}"
    for name in params:
        # A parameter that sets another (replicate_after turns replication on) must not
        # meet that other given otherwise: one of the two would silently lose.
        for implied, value in declared[name].implies:
            if implied in params and params[implied] != value:
                fail(
                    f"{typed[name].partition('=')[0]}: sets {implied}={_shown(value)}, not "
                    f"with {typed[implied]} (one of them would be ignored)"
                )
    try:
        build_policy(policy, **params)
    except ParamError as exc:
        fail(f"{flag_of.get(exc.param, '-P ' + exc.param)}: {exc.reason}")
    return params


def _shown(value: Any) -> str:
    """A parameter's value as ``-P`` takes it (``true``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def refuse_overridden(
    ctx: typer.Context, *, trace: Path | None = None, node_mtbf_h: float | None = None
) -> None:
    """Refuse an option given on the command line that another makes meaningless (it would
    be silently ignored): one line naming both. A trace fixes the jobs and their arrivals,
    so ``--load`` and ``--jobs`` beside it (and ``--seed``, which then draws nothing unless
    nodes fail); ``--node-repair-h`` repairs only nodes that fail, with ``--node-mtbf-h``."""
    if trace is not None:
        if given(ctx, "load"):
            fail("--load: not with --trace (the trace's arrival times give the load)")
        if given(ctx, "jobs"):
            fail("--jobs: not with --trace (the trace's rows are the jobs)")
        if given(ctx, "seed") and node_mtbf_h is None:
            fail(
                "--seed: not with --trace unless --node-mtbf-h (the trace fixes the jobs, so "
                "the seed would draw nothing)"
            )
    if node_mtbf_h is None and given(ctx, "node_repair_h"):
        fail("--node-repair-h: only with --node-mtbf-h (without it no node fails or is repaired)")


def check_named(named: Mapping[str, str], policies: Sequence[str]) -> None:
    """In a sweep, each policy option given must be taken by at least one policy."""
    for name in named:
        if not any(any(p.name == name for p in get_policy(n).params) for n in policies):
            listed = ", ".join(policies)
            fail(f"--{name.replace('_', '-')}: none of the policies ({listed}) takes it")


def trace_rate_jobs_per_h(records: Sequence[JobRecord]) -> float | None:
    """A trace's mean arrival rate, if it spans some time."""
    span = records[-1].submit_s - records[0].submit_s
    return 3600 * (len(records) - 1) / span if span > 0 else None


def make_config(
    policy: str,
    *,
    nodes: int,
    slots: int = 1,
    file_gb: float = 0.0,
    node_mtbf_h: float | None = None,
    node_repair_h: float = 1.0,
    cache_gb: float,
    load: float,
    jobs: int,
    seed: int,
    pipeline: Pipelining,
    warmup: float,
    min_subjob: int,
    trace: Path | None = None,
    params: list[str] | None = None,
    named: Mapping[str, str] | None = None,
    strict: bool = True,
    replicate_hot: int | None = None,
) -> SimConfig:
    """A checked :class:`SimConfig` from the options (raises the errors :func:`user_errors`
    reports). A trace is read here, so a malformed one is reported before anything runs, and
    its own arrival rate and job count stand in for ``--load`` and ``--jobs``."""
    policy_params = policy_params_of(policy, params, named, strict=strict)
    if trace is not None:
        records = load_trace(trace)
        load = trace_rate_jobs_per_h(records) or load
        jobs = len(records)
    return SimConfig(
        policy=policy,
        policy_params=policy_params,
        n_nodes=nodes,
        slots=slots,
        file_gb=file_gb,
        node_mtbf_h=node_mtbf_h,
        node_repair_h=node_repair_h,
        cache_gb=cache_gb,
        load_jobs_per_h=load,
        n_jobs=jobs,
        seed=seed,
        pipelining=pipeline,
        warmup_fraction=warmup,
        min_subjob_events=min_subjob,
        trace=trace,
        replicate_hot=replicate_hot,
    )
