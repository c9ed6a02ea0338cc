"""The service's user code on a worker: each job's processor in a sandboxed child
(:mod:`datasched.sandbox`), kept between the job's packets; results merged in one too.

The worker hands a child the packet's local file as a read-only descriptor and gets the
result back as opaque bytes, which it returns to the master unopened: neither the worker nor
the master unpickles what a user's code made.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

from datasched.runtime.compute import PacketError
from datasched.runtime.events import ReadSpec
from datasched.sandbox.confine import Confinement, LimitReached, SandboxUnavailable, UserCode
from datasched.sandbox.confine import sandbox_problem as _problem
from datasched.sandbox.host import ChildFailed, ChildPool, merge_results

__all__ = ["CHILDREN", "merge_task", "sandboxed_packet", "worker_sandbox_problem"]

CHILDREN = ChildPool()
"""This worker's sandboxed children, kept between a job's packets."""


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
) -> tuple[bytes, int, float, float, float]:
    """Run a packet of a service job in its sandbox, within what the job has left of its CPU
    and wall time: ``(result bytes, bytes read, open s, compute s, CPU s of the sandbox)``;
    :class:`PacketError` with the reason."""
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
    }
    try:
        with CHILDREN.borrow(conf, code) as child:
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
        raise PacketError(exc.kind, url, exc.message, exc.traceback) from None
    except (LimitReached, SandboxUnavailable) as exc:
        raise PacketError("processor", url, str(exc)) from None
    bytes_read = int(stats["bytes_read"])
    return blob, bytes_read, stats["open_s"], stats["compute_s"], stats["cpu_s"]


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


def worker_sandbox_problem() -> str | None:
    """Why this worker cannot confine user code (None: it can); run on every worker."""
    return _problem()
