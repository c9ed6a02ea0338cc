"""The runner as the daemon drives it: :class:`~datasched.service.runner.Runner` is asyncio
code that must own its event loop, while the daemon's dispatcher and API are threads.
:class:`ThreadedRunner` runs the runner's loop in a thread of its own and hands every call
over to it (``call_soon_threadsafe``), so that the engine's state is only ever touched from
its loop; the listener is called from that loop, in order, as the contract says.

:func:`make_runner` is the daemon's default runner factory (``datasched serve``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from datasched.runtime.session import ClusterOptions
from datasched.runtime.tls import check_tls_options
from datasched.sandbox.confine import Confinement
from datasched.service.contracts import ElementaryJob, ProcessorWork, RunnerListener

__all__ = ["ThreadedRunner", "make_runner"]

T = TypeVar("T")

START_TIMEOUT_S = 600.0
"""A cluster of batch jobs may wait in its queue; a local one starts in seconds."""
MERGE_TIMEOUT_S = 3600.0
"""How long the daemon waits for a request's results to be merged on a worker."""


class ThreadedRunner:
    """The daemon's :class:`~datasched.service.daemon.Runner` over the asyncio runner.

    ``options`` are the runner's keyword arguments (``policy``, ``cluster``,
    ``processor_root``, ``output_root``, ...)."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    def start(self, listener: RunnerListener) -> None:
        """Start the loop's thread and, in it, the runner (its cluster and engine); returns
        once the engine runs, or raises what stopped it."""
        from datasched.service.runner import Runner

        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="runner", daemon=True)
        self._thread.start()
        self._runner = Runner(listener, **self.options)
        future = asyncio.run_coroutine_threadsafe(self._runner.start(), loop)
        try:
            future.result(timeout=START_TIMEOUT_S)
        except BaseException:
            self._halt()
            raise

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the runner's loop; its result, or what it raised."""
        loop = self._loop
        if loop is None or self._runner is None:
            raise RuntimeError("runner: not started")
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn(*args))
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result(timeout=60)

    def submit(self, job: ElementaryJob, done_ranges: Sequence[tuple[str, int, int]]) -> None:
        """Hand ``job`` over with the ranges ``(url, start, stop)`` already done."""
        done: dict[str, list[tuple[int, int]]] = {}
        for url, start, stop in done_ranges:
            done.setdefault(url, []).append((start, stop))
        self._call(self._runner.submit, job, done)

    def cancel(self, job_id: str) -> None:
        self._call(self._runner.cancel, job_id)

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        """The merge of ``results`` (opaque bytes), made on a worker in a sandbox."""
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            raise RuntimeError("runner: not started")
        future = asyncio.run_coroutine_threadsafe(runner.merge(work, results), loop)
        merged: bytes = future.result(timeout=MERGE_TIMEOUT_S)
        return merged

    def cluster(self) -> Mapping[str, Any]:
        if self._runner is None or self._loop is None:
            return {"running": False, "nodes": [], "jobs": []}
        result: Mapping[str, Any] = self._call(self._runner.cluster)
        return result

    def stop(self) -> None:
        """Stop the runner (its engine and the cluster it started), then the loop."""
        loop, runner = self._loop, self._runner
        if loop is not None and runner is not None:
            future = asyncio.run_coroutine_threadsafe(runner.stop(), loop)
            with contextlib.suppress(Exception):  # stopping anyway: the loop goes next
                future.result(timeout=60)
        self._halt()

    def _halt(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = self._runner = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        if loop is not None and not loop.is_running():
            loop.close()


def make_runner(
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    cache_dir: Path | None = None,
    roots: Sequence[Path] = (),
    policy: str = "out-of-order",
    jobqueue: Any = None,
    cache_gb: float | None = None,
    tertiary_mb_s: float | None = None,
    confine: Confinement | None = None,
    user_dirs: bool = False,
    tls_ca_file: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> ThreadedRunner:
    """The daemon's runner: ``workers`` local Dask workers (default 4), or the cluster at
    ``scheduler`` (a ``tls://`` one with ``tls_ca_file``, ``tls_cert`` and ``tls_key``,
    checked here: :class:`~datasched.runtime.tls.TlsError` names the option), or
    ``workers`` batch jobs (``jobqueue``); processors, commands and the files they name are
    found, and commands' outputs written, under ``roots`` (relative paths from the first;
    with ``user_dirs``, outputs in each user's own directory); user code runs confined by
    ``confine`` (default: a sandbox). A cluster the runner starts is closed: TLS with
    credentials made for it, its HTTP servers on loopback (docs/runtime.md, "A closed
    cluster")."""
    tls = check_tls_options(scheduler, tls_ca_file, tls_cert, tls_key)
    kw: dict[str, Any] = {"scheduler_address": scheduler, "jobqueue": jobqueue, "tls": tls}
    if workers is not None:
        kw["workers"] = workers
    if cache_dir is not None:
        kw["cache_root"] = cache_dir
    if cache_gb is not None:
        kw["cache_bytes"] = int(cache_gb * 1e9)
    if tertiary_mb_s is not None:  # storage throttled per worker (demos, tests)
        kw["tertiary_bytes_per_s"] = tertiary_mb_s * 1e6
    # The daemon's own local workers run as the jobs' account, confined (as root).
    kw["confine_workers"] = confine
    kw["worker_roots"] = tuple(Path(r).resolve() for r in roots)
    return ThreadedRunner(
        policy=policy,
        cluster=ClusterOptions(**kw),
        roots=list(roots),
        confine=confine,
        user_dirs=user_dirs,
    )
