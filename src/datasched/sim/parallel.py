"""Independent simulations in worker processes, or on the workers of a Dask cluster.

A simulation is one Python thread's work from start to end, so the only way to use a second
core is a second process. Each run is seeded by its own config, so the results do not depend
on how many processes computed them, on which machines, or in which order they finished.

The Dask path (``scheduler="tcp://HOST:PORT"``, or a :class:`DaskScheduler` whose ``tls://``
address comes with the client's credentials) imports ``distributed`` only when it is used:
the simulator itself needs no Dask.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import (
    CancelledError,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    as_completed,
)
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ClusterError",
    "DaskScheduler",
    "SchedulerRef",
    "check_scheduler",
    "map_in_processes",
    "usable_cores",
]

T = TypeVar("T")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 5.0
"""How long a Dask scheduler has to answer before its address is reported as unreachable."""

INSTALL_HINT = "pip install 'datasched[runtime]'"


class ClusterError(Exception):
    """A Dask scheduler that cannot be used: a malformed address, no answer, something else
    answering, or no Dask installed here. ``reason`` says which, in one line."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(reason)
        self.address = address
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DaskScheduler:
    """A Dask scheduler to run on: its address and, for a ``tls://`` one, the client's
    credentials as a :class:`distributed.security.Security` (the command line builds it
    from ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``)."""

    address: str
    security: Any = None

    def __str__(self) -> str:  # what progress lines and messages show
        return self.address


SchedulerRef: TypeAlias = str | DaskScheduler
"""A scheduler's address alone (``tcp://HOST:PORT``), or with its credentials."""

TLS_HINT = (
    "a scheduler that requires TLS takes its tls:// address and --tls-ca-file, --tls-cert, "
    "--tls-key"
)


def _scheduler(ref: SchedulerRef) -> DaskScheduler:
    return ref if isinstance(ref, DaskScheduler) else DaskScheduler(ref)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or a batch
    system may narrow; all of the machine's where the platform cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def map_in_processes(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    on_done: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, in up to ``processes`` worker processes, or as tasks
    on the Dask cluster whose scheduler is at ``scheduler`` (``tcp://HOST:PORT``, or a
    :class:`DaskScheduler` with its credentials; then ``processes`` is not used: the
    cluster's workers decide how many run at once).

    ``on_done(index, result)`` is called in this process as each result arrives (in the order
    they finish when parallel; drives a progress bar). With one process, or one item, nothing
    is forked. ``fn`` and the items must pickle (a module-level function, plain data); on a
    cluster its workers must be able to import them (datasched installed there, the same
    version). The first exception is raised here once the runs not yet started are cancelled.
    A scheduler that cannot be used raises :class:`ClusterError` before anything runs, and
    so does losing it midway.
    """
    if scheduler is not None:
        return _map_on_cluster(fn, items, _scheduler(scheduler), on_done)
    if processes < 1:
        raise ValueError(f"processes: must be at least 1, got {processes}")
    if processes == 1 or len(items) <= 1:
        out: list[R] = []
        for i, item in enumerate(items):
            result = fn(item)
            out.append(result)
            if on_done is not None:
                on_done(i, result)
        return out
    results: dict[int, R] = {}
    workers = min(processes, len(items))
    with ProcessPoolExecutor(max_workers=workers, initializer=_worker_signals) as pool:
        futures: dict[Future[R], int] = {pool.submit(fn, item): i for i, item in enumerate(items)}
        try:
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if on_done is not None:
                    on_done(i, results[i])
        except (KeyboardInterrupt, SystemExit):
            # Stopped from outside (Ctrl-C, SIGTERM): the runs under way are abandoned,
            # not waited for, and their processes do not outlive this one.
            _stop_workers(pool)
            raise
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [results[i] for i in range(len(items))]


def _worker_signals() -> None:
    """In a worker process: Ctrl-C is for the parent alone, and SIGTERM ends the worker.

    A terminal sends SIGINT to the whole process group; the parent stops the workers itself
    (:func:`_stop_workers`, keeping what finished), whereas a worker interrupted on its own
    prints a traceback and may break the pool under the parent's feet. A worker forked while
    the parent turns SIGTERM into KeyboardInterrupt (``reproduce``) inherits that handler;
    the pool's worker loop catches the exception and waits for more work, so the parent's
    ``terminate()`` would not end it. The default action does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate ``pool``'s worker processes and shut it down without waiting for them."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    # Taken now: shutdown() forgets it.
    manager = getattr(pool, "_executor_manager_thread", None)
    for process in workers:
        with suppress(Exception):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        with suppress(Exception):
            process.join(timeout=5)
    # The pool's manager thread closes its wake-up pipe as it ends, while the interpreter's
    # exit hook writes to that pipe without a lock: left running, it races the exit and may
    # print "Bad file descriptor" from the hook. Ended here, the pipe is marked closed first.
    if manager is not None:
        with suppress(Exception):
            manager.join(timeout=5)


# -- Dask --------------------------------------------------------------------------------------


def _import_distributed(address: str) -> Any:
    try:
        import distributed
    except ModuleNotFoundError as exc:
        raise ClusterError(
            address, f"running on a Dask cluster needs Dask: {INSTALL_HINT} ({exc.name} is missing)"
        ) from exc
    return distributed


def check_scheduler(scheduler: SchedulerRef, *, timeout_s: float | None = None) -> int:
    """Ask the Dask scheduler at ``scheduler`` who it is; return how many workers it has now.

    Raises :class:`ClusterError` when the address is malformed, when nothing answers within
    ``timeout_s`` (default :data:`CONNECT_TIMEOUT_S`), when the scheduler closes the
    connection (a TLS one reached without credentials, or refusing them), when what answers
    is not a Dask scheduler, or when Dask is not installed. Bounded in time even against a
    server that accepts the connection and says nothing (``distributed.Client`` alone would
    wait forever).
    """
    target = _scheduler(scheduler)
    address = target.address
    _import_distributed(address)
    from distributed.comm.core import CommClosedError, connect

    timeout = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    is_tls = address.startswith("tls://")
    if is_tls and target.security is None:
        raise ClusterError(address, f"{address} is a tls:// address: {TLS_HINT}")
    hint = "" if is_tls else f" ({TLS_HINT})"
    args = {} if target.security is None else target.security.get_connection_args("client")

    async def identity() -> Any:
        await _probe(address, timeout)
        comm = None
        try:
            comm = await connect(address, timeout=timeout, **args)  # type: ignore[no-untyped-call]
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            if comm is not None:
                comm.abort()

    try:
        info = _run(asyncio.wait_for(identity(), timeout))
    except ValueError as exc:  # distributed's address parser
        raise ClusterError(
            address, f"{address!r} is not a scheduler address like tcp://HOST:PORT ({exc})"
        ) from exc
    except CommClosedError as exc:  # TLS refused, or a TLS scheduler reached over tcp://
        why = " ".join(str(exc).split())
        raise ClusterError(address, f"{address} closed the connection: {why}{hint}") from exc
    except _Unreachable as exc:
        raise ClusterError(address, f"{address}: {exc}") from exc
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            address, f"no Dask scheduler answered at {address} within {timeout:g} s{hint}"
        ) from exc
    except Exception as exc:  # garbage from another kind of server, read as a frame
        raise ClusterError(address, f"{address} does not answer as a Dask scheduler") from exc
    if not isinstance(info, dict) or info.get("type") != "Scheduler":
        kind = info.get("type") if isinstance(info, dict) else None
        what = f" (it is a {kind})" if isinstance(kind, str) else ""
        raise ClusterError(address, f"{address} is not a Dask scheduler{what}")
    return len(info.get("workers") or {})


class _Unreachable(Exception):
    """Why nothing at all can answer at an address: its host does not resolve, or nothing
    listens on its port."""


async def _probe(address: str, timeout: float) -> None:
    """Resolve the host of a ``tcp://`` or ``tls://`` address and open a plain connection to
    it, so that a host that does not resolve, or a port where nothing listens, is told as
    such and at once. distributed's own ``connect`` retries both until its timeout is over and
    then says only that it timed out. Other protocols are left to ``connect``."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return
    host, port = parse_host_port(location)
    loop = asyncio.get_running_loop()
    try:
        # getaddrinfo runs in a thread: a resolver that hangs is bounded by the timeout.
        await asyncio.wait_for(loop.getaddrinfo(host, port), timeout)
    except OSError as exc:  # socket.gaierror
        raise _Unreachable(f"host {host!r} is not known ({exc.strerror or exc})") from exc
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError as exc:
        raise _Unreachable(f"nothing listens there (connection refused by {host})") from exc
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code, also where this thread already runs
    an event loop (a notebook): then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _map_on_cluster(
    fn: Callable[[T], R],
    items: Sequence[T],
    target: DaskScheduler,
    on_done: Callable[[int, R], None] | None,
) -> list[R]:
    """:func:`map_in_processes` on a Dask cluster: one task per item."""
    address = target.address
    distributed = _import_distributed(address)
    check_scheduler(target)
    if not items:
        return []
    try:
        client = distributed.Client(
            address, timeout=CONNECT_TIMEOUT_S, set_as_default=False, security=target.security
        )
    except (OSError, TimeoutError) as exc:  # gone since it answered check_scheduler
        raise ClusterError(address, f"lost the Dask scheduler at {address}: {exc}") from exc
    results: dict[int, R] = {}
    with client:
        # pure=False: a task per item even where two items are equal (keys are not hashes).
        futures = client.map(fn, items, pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        try:
            for future in distributed.as_completed(futures, loop=client.loop):
                i = index[future.key]
                results[i] = future.result()
                if on_done is not None:
                    on_done(i, results[i])
        except BaseException as exc:
            # Cancelling is tidying up: a failure here (the scheduler gone) must not hide
            # the error that stopped the run.
            with suppress(Exception):
                client.cancel([f for f in futures if not f.done()])
            if isinstance(exc, CancelledError):  # not by us: the scheduler went away
                why = getattr(exc, "reason", "cancelled")
                raise ClusterError(
                    address, f"the Dask cluster at {address} dropped the runs ({why})"
                ) from exc
            raise
    return [results[i] for i in range(len(items))]
