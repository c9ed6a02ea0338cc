"""Workers started as batch jobs: a dask-jobqueue cluster on Slurm, HTCondor, PBS or LSF.

``datasched run --jobqueue slurm --jobqueue-args "queue=debug walltime=01:00:00"`` asks the
batch system for ``--workers`` jobs, each one Dask worker (one node of the scheduling core),
named ``datasched-<kind>-<i>`` so that a worker's cache directory is the same from run to run.
The arguments are checked here, before anything is submitted: an unknown key, a bad value, a
missing dask-jobqueue or a missing submit command (``sbatch`` ...) is one error naming it.

Only :func:`open_batch_cluster` and :func:`job_script` import dask-jobqueue; parsing and
checking the arguments need nothing but this module.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BATCH_SYSTEMS",
    "BatchSystem",
    "JobqueueError",
    "JobqueueSpec",
    "check_submit_command",
    "cluster_kwargs",
    "job_script",
    "open_batch_cluster",
    "parse_jobqueue_args",
    "require_jobqueue",
    "wait_for_jobs",
]

INSTALL_HINT = "pip install 'datasched[runtime]' (or pip install dask-jobqueue)"


class JobqueueError(ValueError):
    """A batch system cannot be used as asked; the message names the option, the key or the
    missing program, and the reason."""


@dataclass(frozen=True, slots=True)
class BatchSystem:
    """One batch system dask-jobqueue drives: its cluster class, its submit command and the
    keys of ``--jobqueue-args`` only it takes (beyond :data:`COMMON_KEYS`)."""

    kind: str
    cluster_class: str
    submit_command: str
    keys: tuple[str, ...]


BATCH_SYSTEMS: dict[str, BatchSystem] = {
    s.kind: s
    for s in (
        BatchSystem(
            "slurm",
            "SLURMCluster",
            "sbatch",
            ("queue", "account", "walltime", "job_cpu", "job_mem"),
        ),
        BatchSystem(
            "htcondor",
            "HTCondorCluster",
            "condor_submit",
            ("disk", "submit_command_extra", "cancel_command_extra"),
        ),
        BatchSystem("pbs", "PBSCluster", "qsub", ("queue", "account", "walltime", "resource_spec")),
        BatchSystem(
            "lsf",
            "LSFCluster",
            "bsub",
            ("queue", "project", "walltime", "ncpus", "mem", "lsf_units", "use_stdin"),
        ),
    )
}


# -- values ---------------------------------------------------------------------------------


def _text(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"must be a whole number, got {value!r}") from None
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"must be a number, got {value!r}") from None
    if not x > 0:
        raise ValueError(f"must be positive, got {value}")
    return x


def _bytes(value: str) -> str:
    """A size as dask writes it (``4GiB``, ``500 MB``), checked but kept as written."""
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(value)
    except (ValueError, TypeError):
        raise ValueError(f"must be a size such as 4GiB or 500MB, got {value!r}") from None
    if n < 1:
        raise ValueError(f"must be positive, got {value!r}")
    return value


def _bytes_int(value: str) -> int:
    """LSF's ``mem``: bytes as a whole number (dask-jobqueue converts it to ``lsf_units``)."""
    from dask.utils import parse_bytes

    return int(parse_bytes(_bytes(value)))


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {value!r}")


def _walltime(value: str) -> str:
    parts = value.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"must be HH:MM:SS (or MM, or MM:SS), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class _Key:
    parse: Callable[[str], Any]
    repeated: bool = False
    """A list: each ``key=value`` appends (e.g. one batch directive each)."""


_LIST = _Key(_text, repeated=True)

COMMON_KEYS: dict[str, _Key] = {
    "cores": _Key(_positive_int),
    "memory": _Key(_bytes),
    "job_name": _Key(_text),
    "local_directory": _Key(_text),
    "log_directory": _Key(_text),
    "interface": _Key(_text),
    "python": _Key(_text),
    "shebang": _Key(_text),
    "death_timeout": _Key(_positive_float),
    "job_extra_directives": _LIST,
    "job_directives_skip": _LIST,
    "job_script_prologue": _LIST,
    "worker_extra_args": _LIST,
}
"""Keys every batch system takes: dask-jobqueue's own names, passed on as they are."""

OWN_KEYS: dict[str, _Key] = {
    "host": _Key(_text),
    "wait_s": _Key(_positive_float),
    "worker_cache_dir": _Key(_text),
    "tls_dir": _Key(_text),
}
"""Keys of datasched itself: ``host``, the address the scheduler listens on (the workers'
jobs connect to it); ``wait_s``, how long to wait for the workers' jobs to start (queues can
be slow); ``worker_cache_dir``, the cache root on the worker nodes (node-local scratch, set
as ``DATASCHED_CACHE_DIR`` in the job) when it is not ``--cache-dir`` on a shared file
system; ``tls_dir``, where the cluster's TLS credentials are written for the run (a private
directory in it, removed at the end): the jobs read them by path, so it must be on a file
system the nodes share (default: the current directory)."""

KIND_KEYS: dict[str, _Key] = {
    "queue": _Key(_text),
    "account": _Key(_text),
    "project": _Key(_text),
    "walltime": _Key(_walltime),
    "job_cpu": _Key(_positive_int),
    "job_mem": _Key(_bytes),
    "resource_spec": _Key(_text),
    "disk": _Key(_bytes),
    "submit_command_extra": _LIST,
    "cancel_command_extra": _LIST,
    "ncpus": _Key(_positive_int),
    "mem": _Key(_bytes_int),
    "lsf_units": _Key(_text),
    "use_stdin": _Key(_flag),
}

DEFAULT_WAIT_S = 600.0


def _system(kind: str) -> BatchSystem:
    system = BATCH_SYSTEMS.get(kind)
    if system is None:
        known = ", ".join(BATCH_SYSTEMS)
        raise JobqueueError(f"--jobqueue: unknown batch system {kind!r}; known: {known}")
    return system


def _keys_of(system: BatchSystem) -> dict[str, _Key]:
    return {**COMMON_KEYS, **OWN_KEYS, **{k: KIND_KEYS[k] for k in system.keys}}


@dataclass(frozen=True, slots=True)
class JobqueueSpec:
    """A batch system and its checked ``--jobqueue-args``: what :func:`open_batch_cluster`
    needs besides the cluster's size, slots and memory (:class:`ClusterOptions`)."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = _keys_of(_system(self.kind))
        for key in self.args:
            if key not in keys:
                raise JobqueueError(_unknown_key(key, self.kind, keys))

    @property
    def system(self) -> BatchSystem:
        return _system(self.kind)

    @property
    def wait_s(self) -> float:
        return float(self.args.get("wait_s", DEFAULT_WAIT_S))

    @property
    def tls_dir(self) -> Path:
        """Where the run's credentials go (see :data:`OWN_KEYS`), made absolute: the jobs
        are given absolute paths."""
        return Path(self.args.get("tls_dir", ".")).expanduser().resolve()


def _unknown_key(key: str, kind: str, keys: Iterable[str]) -> str:
    return f"--jobqueue-args: unknown key {key!r} for {kind}; known: {', '.join(sorted(keys))}"


def parse_jobqueue_args(kind: str, args: Iterable[str] = ()) -> JobqueueSpec:
    """``KEY=VALUE`` words (each item split as a shell would, so one string may hold several
    and a value may be quoted) checked against what ``kind`` takes. A list-valued key
    (``job_extra_directives``, ...) may be given more than once; any other only once."""
    system = _system(kind)
    keys = _keys_of(system)
    parsed: dict[str, Any] = {}
    for item in args:
        try:
            words = shlex.split(item)
        except ValueError as exc:
            raise JobqueueError(f"--jobqueue-args: cannot split {item!r}: {exc}") from None
        for word in words:
            key, sep, value = word.partition("=")
            if not sep or not key:
                raise JobqueueError(f"--jobqueue-args: {word!r} is not KEY=VALUE")
            spec = keys.get(key)
            if spec is None:
                raise JobqueueError(_unknown_key(key, kind, keys))
            try:
                checked = spec.parse(value)
            except ValueError as exc:
                raise JobqueueError(f"--jobqueue-args: {key}: {exc}") from None
            if spec.repeated:
                parsed.setdefault(key, []).append(checked)
            elif key in parsed:
                raise JobqueueError(f"--jobqueue-args: {key}: given twice")
            else:
                parsed[key] = checked
    return JobqueueSpec(system.kind, parsed)


def check_submit_command(spec: JobqueueSpec) -> None:
    """The batch system's submit command must be on this machine's ``PATH``: dask-jobqueue
    submits each worker's job with it."""
    command = spec.system.submit_command
    if shutil.which(command) is None:
        raise JobqueueError(
            f"--jobqueue {spec.kind}: the submit command {command!r} is not found on PATH "
            f"(run on a machine that can submit {spec.kind} jobs)"
        )


def require_jobqueue() -> Any:
    """The dask-jobqueue module, or an error saying how to install it."""
    try:
        return importlib.import_module("dask_jobqueue")
    except ModuleNotFoundError as exc:
        raise JobqueueError(
            f"--jobqueue: dask-jobqueue is not installed ({exc.name} is missing): {INSTALL_HINT}"
        ) from None


def _cluster_class(spec: JobqueueSpec) -> Any:
    return getattr(require_jobqueue(), spec.system.cluster_class)


def cluster_kwargs(
    spec: JobqueueSpec, *, threads: int, memory: str, cache_bytes: int
) -> dict[str, Any]:
    """The dask-jobqueue cluster's keyword arguments: one worker process a job (a node of
    the core), ``threads`` cores a job and ``memory`` unless the arguments say otherwise,
    no dashboards (the HTTP servers Dask starts anyway on free loopback ports: the
    scheduler's here, each worker's on its node), and stable worker names."""
    args = dict(spec.args)
    host = args.pop("host", None)
    args.pop("wait_s", None)
    args.pop("tls_dir", None)
    cache_dir = args.pop("worker_cache_dir", None)
    scheduler_options: dict[str, Any] = {"dashboard_address": "127.0.0.1:0", "dashboard": False}
    if host is not None:
        scheduler_options["host"] = host
    kwargs: dict[str, Any] = {
        "name": f"datasched-{spec.kind}",  # workers datasched-slurm-0, -1, ...
        "job_name": "datasched-worker",
        "cores": threads,
        "memory": memory,
        "processes": 1,  # one worker a job: a node of the core, with its own cache
        "scheduler_options": scheduler_options,
        **args,
    }
    # After the user's: dask worker takes the last of a repeated option.
    kwargs["worker_extra_args"] = [
        *kwargs.get("worker_extra_args", []),
        *("--no-dashboard", "--dashboard-address", "127.0.0.1:0"),
    ]
    if cache_dir is not None:
        prologue = list(kwargs.get("job_script_prologue", []))
        # In double quotes: $TMPDIR or $USER are expanded on the node, nothing else is.
        quoted = re.sub(r'(["\\`])', r"\\\1", cache_dir)
        prologue.append(f'export DATASCHED_CACHE_DIR="{quoted}"')
        kwargs["job_script_prologue"] = prologue
    if spec.kind == "htcondor" and "disk" not in kwargs:
        # HTCondor needs a disk request; the worker's cache is what it writes.
        kwargs["disk"] = str(max(cache_bytes, 10**9))
    return kwargs


def job_script(
    spec: JobqueueSpec,
    *,
    threads: int = 1,
    memory: str = "2GiB",
    cache_bytes: int = 2 * 10**9,
    scheduler_address: str = "tcp://127.0.0.1:8786",
) -> str:
    """The job script a worker would be submitted with, built offline (no scheduler, no
    submission): for checking ``--jobqueue-args`` and for the docs."""
    cls = _cluster_class(spec)
    kwargs = cluster_kwargs(spec, threads=threads, memory=memory, cache_bytes=cache_bytes)
    name = kwargs.pop("name")
    kwargs.pop("scheduler_options")
    try:
        job = cls.job_cls(scheduler_address, name=f"{name}-0", **kwargs)
    except (TypeError, ValueError) as exc:
        raise JobqueueError(f"--jobqueue-args: {exc}") from None
    return str(job.job_script())


async def open_batch_cluster(
    spec: JobqueueSpec,
    *,
    workers: int,
    threads: int,
    memory: str,
    cache_bytes: int,
    security: Any = None,
) -> Any:
    """A started dask-jobqueue cluster (its scheduler in this process) asked for ``workers``
    jobs; the caller waits for them (``spec.wait_s``) and closes it (which cancels them).

    With ``security`` (a :class:`distributed.security.Security` of files), the scheduler
    listens on ``tls://`` and each job's worker is started with the worker role's CA,
    certificate and key by path (dask-jobqueue's ``--tls-ca-file``, ``--tls-cert``,
    ``--tls-key``)."""
    cls, failures = _recording_submissions(_cluster_class(spec))
    check_submit_command(spec)
    kwargs = cluster_kwargs(spec, threads=threads, memory=memory, cache_bytes=cache_bytes)
    if security is not None:
        kwargs.update(security=security, protocol="tls://")
    try:
        cluster = await cls(asynchronous=True, silence_logs="error", **kwargs)
    except (TypeError, ValueError) as exc:
        raise JobqueueError(f"--jobqueue-args: {exc}") from None
    cluster.submit_failures = failures
    cluster.scale(workers)
    return cluster


def _recording_submissions(cls: Any) -> tuple[Any, list[str]]:
    """``cls`` (a dask-jobqueue cluster class) whose jobs note why their submission failed
    (the submit command's error, first line) in the list returned beside it. dask-jobqueue
    only logs such a failure, and the run would wait ``wait_s`` for workers that will never
    come (:func:`wait_for_jobs` reads the list)."""
    from distributed.core import Status

    failures: list[str] = []

    class Job(cls.job_cls):  # type: ignore[misc]
        async def start(self) -> None:
            try:
                await super().start()
            except Exception as exc:
                # Noted, not raised: raised, dask logs a traceback from its event loop and
                # the job lingers; the wait says it in one line and drops the job (its id
                # None: never submitted). Marked running, as dask expects of a job whose
                # start returned, until then.
                failures.append(_submit_error(exc))
                self.status = Status.running

    return type(cls.__name__, (cls,), {"job_cls": Job}), failures


def _submit_error(exc: BaseException) -> str:
    """The submit command's own message in dask-jobqueue's error (its stderr's first line),
    else the error's first line."""
    text = str(exc)
    if "stderr:" in text:
        lines = [ln.strip() for ln in text.split("stderr:", 1)[1].splitlines() if ln.strip()]
        if lines:
            return lines[0]
    first = text.strip().splitlines()
    return first[0] if first else type(exc).__name__


def _named(command: str, message: str) -> str:
    """``message`` from ``command``, named once."""
    return message if message.startswith(command) else f"{command}: {message}"


SUBMIT_POLL_S = 0.5
"""How often :func:`wait_for_jobs` looks for failed submissions while it waits."""


async def wait_for_jobs(client: Any, workers: int, spec: JobqueueSpec, cluster: Any = None) -> None:
    """All ``workers`` batch jobs running and their workers joined, or an error saying how
    many came within ``wait_s`` (the jobs may wait in the batch system's queue). A job the
    batch system refused (its submit command failed: no controller, a bad account) is an
    error at once, with the command's message, not after ``wait_s``."""
    failures: list[str] = getattr(cluster, "submit_failures", [])
    waiting = asyncio.ensure_future(client.wait_for_workers(workers, timeout=spec.wait_s))
    try:
        while not waiting.done():
            await asyncio.wait([waiting], timeout=SUBMIT_POLL_S)
            if failures and not waiting.done():
                waiting.cancel()
                _forget_unsubmitted(cluster)
                raise JobqueueError(
                    f"--jobqueue {spec.kind}: the batch system refused the workers' jobs "
                    f"({_named(spec.system.submit_command, failures[0])})"
                )
        waiting.result()
    except TimeoutError:
        info = await client.scheduler.identity()
        joined = len(info.get("workers", {}))
        raise JobqueueError(
            f"--jobqueue {spec.kind}: {joined} of {workers} workers started within "
            f"{spec.wait_s:g} s (--jobqueue-args wait_s); their jobs may still be queued: see "
            "the batch system's queue"
        ) from None


def _forget_unsubmitted(cluster: Any) -> None:
    """Drop the jobs that were never submitted from ``cluster`` (and ask for no more), so
    that closing it cancels the others and does not trip over those (dask's cluster expects
    every job it closes to have started)."""
    cluster.worker_spec.clear()
    for name, job in list(cluster.workers.items()):
        if getattr(job, "job_id", None) is None:
            del cluster.workers[name]
