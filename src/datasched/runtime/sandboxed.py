"""The service's user code on a worker: each job's processor in a sandboxed child
(:mod:`datasched.sandbox`), kept between the job's packets; results merged in one too.

The worker hands a child the packet's local file as a read-only descriptor and gets the
result back as opaque bytes, which it returns to the master unopened: neither the worker nor
the master unpickles what a user's code made.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from datasched.runtime.compute import PacketError
from datasched.runtime.events import ReadSpec
from datasched.sandbox.confine import Confinement, LimitReached, SandboxUnavailable, UserCode
from datasched.sandbox.host import Child, ChildFailed, kill_tree, merge_results
from datasched.sandbox.pool import ChildPool

__all__ = [
    "CHILDREN",
    "JobStopped",
    "abort_job",
    "command_running",
    "job_stopped",
    "merge_task",
    "sandboxed_packet",
]

CHILDREN = ChildPool()
"""This worker's sandboxed children, kept between a job's packets."""
_LOCK = threading.Lock()
_RUNNING: dict[str, set[Child | _Command]] = {}
"""The children running a packet, and the commands running, by the job's token."""
_ABORTED: dict[str, float] = {}
"""Jobs stopped (failed, cancelled), by token, with when: their next packets do not run."""
ABORTED_KEPT_S = 3600.0


class JobStopped(Exception):
    """A packet's job was stopped (:func:`abort_job`) before it ran or while it ran. No
    failure: the master cancelled the packet's task, and nothing reads its outcome. The
    Dask tasks (:func:`~datasched.runtime.worker.run_packet`,
    :func:`~datasched.runtime.commands.run_command`) return None for it instead of raising,
    since Dask's worker logs every task that raises as "Compute Failed", with a traceback."""


def abort_job(token: str) -> int:
    """Stop a job's packets on this worker (``client.run``): the children running one are
    killed (their packets end at once, not at the job's limits), and packets still to come
    end without running (:class:`JobStopped`). How many children were killed."""
    now = time.monotonic()
    with _LOCK:
        for old in [t for t, at in _ABORTED.items() if now - at > ABORTED_KEPT_S]:
            del _ABORTED[old]
        _ABORTED[token] = now
        running = list(_RUNNING.get(token, ()))
    for child in running:
        child.close()
    return len(running)


def sandboxed_packet(
    code: UserCode,
    conf: Confinement,
    path: str,
    *,
    url: str,
    tree: str,
    start: int,
    stop: int,
    read: ReadSpec,
    cpu_budget_s: float | None = None,
    wall_budget_s: float | None = None,
    token: str = "",
) -> tuple[bytes, int, float, float, float]:
    """Run a packet of a service job in its sandbox, within what the job has left of its CPU
    and wall time: ``(result bytes, bytes read, open s, compute s, CPU s of the sandbox)``;
    :class:`PacketError` with the reason; :class:`JobStopped` if its job was stopped before
    it ran or while it ran (its child killed)."""
    if "://" in path and not path.startswith("file://"):
        raise PacketError(
            "data",
            url,
            "the node's cache disk is full, and a sandboxed job reads only local copies "
            "(it has no network): free the cache disk or give the node more",
        )
    spec = {
        "dataset": read.dataset,
        "metadata": dict(read.metadata),
        "schema": read.schema,
        "columns": list(read.columns) if read.columns is not None else None,
        "schema_options": [[name, value] for name, value in read.schema_options],
    }
    if job_stopped(token):
        raise JobStopped(token)
    try:
        with CHILDREN.borrow(conf, code) as child, _running(token, child):
            blob, stats = child.packet(
                path.removeprefix("file://"),
                url=url,
                tree=tree,
                start=start,
                stop=stop,
                read=spec,
                timeout_s=min(conf.wall_s, wall_budget_s or conf.wall_s),
                cpu_budget_s=cpu_budget_s,
            )
    except ChildFailed as exc:
        if job_stopped(token):  # its child killed by abort_job: no failure of its own
            raise JobStopped(token) from None
        raise PacketError(exc.kind, url, exc.message, exc.traceback) from None
    except (LimitReached, SandboxUnavailable) as exc:
        if job_stopped(token):
            raise JobStopped(token) from None
        raise PacketError("processor", url, str(exc)) from None
    bytes_read = int(stats["bytes_read"])
    return blob, bytes_read, stats["open_s"], stats["compute_s"], stats["cpu_s"]


class _Command:
    """A command job's process, as :func:`abort_job` stops it: its whole sandbox killed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def close(self) -> None:
        kill_tree(self.pid)


def job_stopped(token: str) -> bool:
    """Whether the job of ``token`` was stopped on this worker (:func:`abort_job`)."""
    with _LOCK:
        return bool(token) and token in _ABORTED


@contextlib.contextmanager
def command_running(token: str) -> Iterator[Callable[[int], None]]:
    """For a command job's packet: a function to call with its process's id once started,
    so that :func:`abort_job` kills it (a cancelled command held its slot to its end); a
    command started after its job was stopped is killed at once."""
    started: list[_Command] = []

    def register(pid: int) -> None:
        command = _Command(pid)
        started.append(command)
        with _LOCK:
            stopped = token in _ABORTED
            if not stopped and token:
                _RUNNING.setdefault(token, set()).add(command)
        if stopped:
            command.close()

    try:
        yield register
    finally:
        _forget(token, started)


@contextlib.contextmanager
def _running(token: str, child: Child) -> Iterator[None]:
    with _LOCK:
        _RUNNING.setdefault(token, set()).add(child)
    try:
        yield
    finally:
        _forget(token, [child])


def _forget(token: str, ended: Iterable[Child | _Command]) -> None:
    """``ended`` no longer runs for the job of ``token``."""
    with _LOCK:
        kids = _RUNNING.get(token, set())
        kids.difference_update(ended)
        if not kids:
            _RUNNING.pop(token, None)


def merge_task(
    conf: Confinement, code: UserCode | None, blobs: Sequence[bytes], timeout_s: float
) -> bytes:
    """A Dask task: the merge of a job's or request's results, in a sandbox that loaded its
    processor. ``ValueError`` with the reason if they cannot be merged."""
    try:
        return merge_results(
            conf, code, blobs, timeout_s=timeout_s, scratch_base=tempfile.gettempdir()
        )
    except ChildFailed as exc:
        text = exc.message + (f"\n{exc.traceback}" if exc.traceback else "")
        raise ValueError(text) from None
    except (LimitReached, SandboxUnavailable) as exc:
        raise ValueError(str(exc)) from None
