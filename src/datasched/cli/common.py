"""What every command of the command line shares: the consoles, one-line errors, number
lists, output formats, and where simulations run (local processes or a Dask cluster).

Bad input gets one line on stderr naming the option (or the file's line and field) and the
reason, exit code 2, no traceback, and nothing written: :func:`user_errors` turns the
library's own errors into that line.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from datasched.core.data import DataError
from datasched.core.model import ModelError
from datasched.core.policy import ParamError
from datasched.core.trace import TraceSink, json_lines_sink
from datasched.policies import UnknownPolicyError
from datasched.sim.experiment import ConfigError
from datasched.sim.parallel import (
    INSTALL_HINT,
    ClusterError,
    DaskScheduler,
    SchedulerRef,
    check_scheduler,
    usable_cores,
)
from datasched.sim.workload import TraceError, WorkloadError

if TYPE_CHECKING:
    from datasched.studies.resume import RunStore

__all__ = [
    "OPTION_OF",
    "check_out_dir",
    "check_out_file",
    "cluster_errors",
    "err",
    "fail",
    "given",
    "hours",
    "jsonable",
    "keeping_runs",
    "kept_runs",
    "out",
    "parse_floats",
    "parse_ints",
    "percent",
    "print_json",
    "processes_or_default",
    "reachable_scheduler",
    "run_progress",
    "sigterm_interrupts",
    "size",
    "unwritable",
    "user_errors",
    "where_to_run",
]

# What is printed is never read as Rich markup or emoji codes: it holds what users typed and
# what a server sent (a request's title "[/bold]" broke an administrator's table, ":fire:" came
# out as an emoji). Styles are given as styles (``style=``, ``Text``).
out = Console(markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False)

OPTION_OF = {
    "policy": "--policy",
    "load_jobs_per_h": "--load",
    "n_nodes": "--nodes",
    "slots": "--slots",
    "n_jobs": "--jobs",
    "cache_gb": "--cache-gb",
    "file_gb": "--file-gb",
    "seed": "--seed",
    "min_subjob_events": "--min-subjob",
    "warmup_fraction": "--warmup",
    "cooldown_fraction": "--warmup",
    "max_backlog": "--max-backlog",
    "node_mtbf_h": "--node-mtbf-h",
    "node_repair_h": "--node-repair-h",
    "replicate_hot": "--replicate-hot",
}
"""Config and workload field -> the option that sets it, for error messages."""


def given(ctx: typer.Context | None, name: str) -> bool:
    """Whether the command's parameter ``name`` (its Python name: ``node_repair_h``) was
    given on the command line, rather than left at its default: an option that another one
    makes meaningless is refused when given, not when defaulted. False without a context (a
    command called as a function)."""
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "PROMPT")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one ``error:`` line on stderr and exit (2: bad input)."""
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


_PASTED_PATHS = ("/api/v1", "/dashboard")
"""Paths a user may paste with the server's address (the API's base, the dashboard's page)."""


def server_root(server: str, option: str = "--server") -> str:
    """The service's root address from ``server``: an http(s) URL, with a pasted
    ``/api/v1`` or ``/dashboard`` at its end taken off (the commands add the API's path
    themselves; a path before it, a proxy's prefix, is kept); anything else is one line."""
    import urllib.parse

    text = server.strip().rstrip("/")
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        fail(
            f"{option}: expected the service's address, such as http://127.0.0.1:8765, "
            f"got {server!r}"
        )
    if parts.query or parts.fragment:
        fail(f"{option}: give the service's address without a query or fragment, got {server!r}")
    for tail in _PASTED_PATHS:
        if parts.path.endswith(tail):
            text = text[: -len(tail)]
            break
    return text.rstrip("/")


@contextmanager
def user_errors(**options: str) -> Iterator[None]:
    """Turn bad-input exceptions into one line naming the option (or trace line) and reason.

    ``options`` renames fields for one command (``load_jobs_per_h="--loads"`` in a sweep).
    """
    names = {**OPTION_OF, **options}
    try:
        yield
    except (ConfigError, WorkloadError, DataError, ModelError) as exc:
        fail(f"{names.get(exc.field, exc.field)}: {exc.reason}")
    except ParamError as exc:
        fail(f"{names.get(exc.param, '-P ' + exc.param)}: {exc.reason}")
    except UnknownPolicyError as exc:
        fail(f"{names['policy']}: {exc}")
    except TraceError as exc:
        fail(str(exc))
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        fail(f"{where}{exc.strerror or exc}", code=1)


# -- number lists and paths ---------------------------------------------------------------


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


def unwritable(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` cannot be written (as a directory, or as a file), missing directories
    above it created on the way; None when it can.

    Asked before anything runs, so that a command never stops with a traceback after its
    work, or leaves half of its outputs behind: a path under a file (``/dev/null/x``), a file
    where a directory is wanted or the other way round, a directory that may not be written.
    The last is tried, not guessed from permission bits (root passes those, and a read-only
    file system says no only when written): an empty file is made there and removed.
    """
    if path.exists():
        if directory and not path.is_dir():
            return f"{path} exists and is not a directory"
        if not directory and path.is_dir():
            return f"{path} is a directory"
        home = path if directory else path.parent
    else:
        home = path.parent
        while not home.exists() and home != home.parent:
            home = home.parent
        if not home.is_dir():
            return f"{home} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".datasched-probe-", dir=home)
        os.close(fd)
        Path(probe).unlink()
        if not directory and path.exists():
            with path.open("a"):  # opened to append, nothing written: unchanged
                pass
    except OSError as exc:
        if not directory and path.exists():
            return f"cannot write {path}: {exc.strerror or exc}"
        return f"cannot write in {home}: {exc.strerror or exc}"
    return None


def check_out_dir(out_dir: Path, option: str = "--out") -> None:
    """Refuse an output directory that cannot be written (a file, under a file, not
    writable), before anything runs: one line naming ``option``."""
    problem = unwritable(out_dir, directory=True)
    if problem is not None:
        fail(f"{option}: {problem}")


def check_out_file(path: Path | None, option: str, *, make_parents: bool = False) -> None:
    """Refuse an output file that cannot be written (a directory, not writable; its
    directory missing unless ``make_parents``: the writer creates it), before anything
    runs."""
    if path is None:
        return
    if not make_parents and not path.parent.is_dir() and not path.is_dir():
        if path.parent.exists():
            fail(f"{option}: {path.parent} is not a directory")
        fail(f"{option}: directory {path.parent} does not exist")
    problem = unwritable(path, directory=False)
    if problem is not None:
        fail(f"{option}: {problem}")


@contextmanager
def open_trace(path: Path | None) -> Iterator[TraceSink | None]:
    """A sink writing the scheduler's trace to ``path`` as JSON lines (None: no trace)."""
    if path is None:
        yield None
        return
    with path.open("w", encoding="utf-8") as stream:
        yield json_lines_sink(stream)


# -- output -------------------------------------------------------------------------------


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


def jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """NaN (no job measured) becomes null: JSON has no NaN."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def print_json(obj: Any) -> None:
    """The one JSON document of a ``--json`` run, on stdout."""
    sys.stdout.write(json.dumps(obj, allow_nan=False) + "\n")


# -- long commands: progress and stops -----------------------------------------------------


@contextmanager
def run_progress() -> Iterator[Callable[[str], None]]:
    """A sink for a study's progress lines: on a terminal, a status line under which the
    finished runs scroll; otherwise each line printed plainly on stderr (a log, a pipe)."""
    if not err.is_terminal:

        def plain(message: str) -> None:
            err.print(message, highlight=False, markup=False, soft_wrap=True)

        yield plain
        return
    with err.status("starting ...") as status:

        def live(message: str) -> None:
            if message.startswith("["):
                err.print(message, highlight=False, markup=False)
            status.update(message)

        yield live


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a batch system's stop, ``kill``) stops the command as Ctrl-C does, so that
    what finished is kept; the previous handler is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def kept_runs(out_dir: Path, tag: dict[str, Any], *, resume: bool) -> RunStore:
    """Where a reproduction keeps each run as it finishes: ``out_dir/runs/``, tagged with
    ``tag`` (the study, its options) and datasched's version; emptied first unless
    ``resume`` (:mod:`datasched.studies.resume`)."""
    from datasched import __version__
    from datasched.studies.resume import RunStore

    store = RunStore(out_dir / "runs", {**tag, "version": __version__})
    if not resume:
        store.clear()
    return store


@contextmanager
def keeping_runs(store: RunStore) -> Iterator[None]:
    """A reproduction's runs under way: SIGTERM stops them as Ctrl-C does, and either
    leaves the finished runs in ``store``, says so (``--resume`` goes on from them) and
    exits with status 130."""
    try:
        with sigterm_interrupts():
            yield
    except KeyboardInterrupt:
        err.print(
            f"interrupted: {len(store)} finished runs are kept in {store.root}; the same "
            "command with --resume goes on from there",
            highlight=False,
            markup=False,
            soft_wrap=True,  # a long path is not cut by line breaks
        )
        raise typer.Exit(130) from None


# -- where simulations run ----------------------------------------------------------------


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


def reachable_scheduler(scheduler: str, files: Any = None) -> tuple[SchedulerRef, int]:
    """The Dask scheduler of ``--scheduler`` (with the credentials of ``--tls-*``: ``files``,
    checked :class:`~datasched.runtime.tls.TlsFiles`, or None), asked who it is now, and how
    many workers it has: ``(target, workers)``.

    Every command that takes ``--scheduler`` calls this before anything runs, so that an
    address that cannot be used is one line and exit code 2 within a few seconds (a host that
    does not resolve, a port where nothing listens, a server that does not answer as a Dask
    scheduler within :data:`~datasched.sim.parallel.CONNECT_TIMEOUT_S`), never a wait and a
    traceback (docs/runtime.md, "Existing clusters").
    """
    target: SchedulerRef = scheduler
    if files is not None:
        from datasched.runtime.tls import security

        try:
            target = DaskScheduler(scheduler, security(files))
        except ModuleNotFoundError as exc:
            fail(f"--scheduler: running on a Dask cluster needs Dask: {INSTALL_HINT} ({exc.name})")
    try:
        workers = check_scheduler(target)
    except ClusterError as exc:
        fail(f"--scheduler: {exc.reason}")
    return target, workers


def where_to_run(
    processes: int | None,
    scheduler: str | None,
    tls_ca_file: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> tuple[int, SchedulerRef | None]:
    """``--processes``, ``--scheduler`` and ``--tls-*`` checked: ``(processes, scheduler)``
    to run with (a ``tls://`` scheduler comes with its credentials, a
    :class:`~datasched.sim.parallel.DaskScheduler`).

    Without ``--scheduler``, :func:`processes_or_default`. With it, the scheduler must answer
    now (within a few seconds), so that a wrong address is one error line before anything
    runs; ``--processes`` beside it is refused rather than silently ignored, and so are
    credentials beside a ``tcp://`` address (docs/runtime.md, "A closed cluster").
    """
    from datasched.runtime.tls import TlsError, check_tls_options

    try:
        files = check_tls_options(scheduler, tls_ca_file, tls_cert, tls_key)
    except TlsError as exc:
        fail(str(exc))
    if scheduler is None:
        return processes_or_default(processes), None
    if processes is not None:
        fail(
            "--processes: not with --scheduler (the cluster's workers decide how many "
            "simulations run at once)"
        )
    target, workers = reachable_scheduler(scheduler, files)
    if workers == 0:
        err.print(
            f"note: the Dask cluster at {scheduler} has no workers yet; the simulations wait "
            "for some to join",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return 1, target
