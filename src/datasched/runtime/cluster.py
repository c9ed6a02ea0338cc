"""Opening the cluster jobs run on: the embedded one (a ``LocalCluster``, or, for the
service, confined workers: :mod:`~datasched.runtime.confined`), an existing Dask scheduler,
or workers started as batch jobs (:mod:`~datasched.runtime.batch`); every cluster started
here closed (docs/runtime.md, "A closed cluster"), with the cache plugin on every worker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
from distributed import Client, LocalCluster

from datasched.core.hot import HotReplicator
from datasched.core.policy import ParamError
from datasched.runtime.batch import (
    JobqueueError,
    JobqueueSpec,
    open_batch_cluster,
    wait_for_jobs,
)
from datasched.runtime.confined import ConfinedCluster, confined_cluster
from datasched.runtime.tls import TlsFiles, cluster_security, private_credentials, security
from datasched.runtime.worker import (
    PLUGIN_NAME,
    CacheDirError,
    CachePlugin,
    cache_contents,
)
from datasched.sandbox.confine import Confinement

__all__ = [
    "CLOSED_HTTP_CONFIG",
    "LOCAL_WORKER_CONFIG",
    "ClusterOptions",
    "ClusterSetupError",
    "cache_by_name",
    "check_cache_root",
    "open_cluster",
]


class ClusterSetupError(RuntimeError):
    """The cluster cannot run the jobs as asked (a cache directory a worker cannot create);
    the message names the option and the reason."""


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where the jobs run and with how much cache."""

    workers: int = 4
    slots: int = 1
    """Subjobs a worker runs at once (each with its packets in flight)."""
    threads_per_slot: int = 2
    """Two threads a slot: one packet's file can be fetched while the other computes."""
    cache_bytes: int = 2 * 10**9
    cache_root: Path = Path(".datasched-cache")
    scheduler_address: str | None = None
    tertiary_bytes_per_s: float | None = None
    memory_limit: str = "2GiB"
    jobqueue: JobqueueSpec | None = None
    """Start the workers as batch jobs (one worker a job) instead of on this machine."""
    replicate_hot: int | None = None
    """Replicate files read by this many jobs between worker caches, beside the policy
    (:class:`~datasched.core.hot.HotReplicator`; None: off)."""
    tls: TlsFiles | None = None
    """The CA, certificate and key to connect to the ``tls://`` scheduler at
    ``scheduler_address`` (checked by :func:`~datasched.runtime.tls.check_tls_options`).
    A cluster datasched starts (embedded or batch) makes its own and takes none."""

    confine_workers: Confinement | None = None
    """The service's own local workers: started as ``confine_workers.run_as`` (when this
    process is root and it sandboxes), each in a view of its own holding its cache, the
    ``worker_roots`` and its TLS credentials (:mod:`~datasched.runtime.confined`)."""
    worker_roots: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.jobqueue is not None and self.scheduler_address is not None:
            raise ValueError("jobqueue: not with a scheduler address (--scheduler)")
        address = self.scheduler_address
        if self.tls is not None and address is None:
            raise ValueError(
                "tls: only with a tls:// scheduler address (a cluster datasched starts makes "
                "its own credentials)"
            )
        if address is not None and address.startswith("tls://") != (self.tls is not None):
            raise ValueError(
                f"tls: the scheduler address {address} needs them"
                if self.tls is None
                else f"tls: not with {address}, which is not a tls:// address"
            )
        if self.workers < 1:
            raise ValueError(f"workers: must be at least 1, got {self.workers!r}")
        if self.slots < 1:
            raise ValueError(f"slots: must be at least 1, got {self.slots!r}")
        if self.cache_bytes < 0:
            raise ValueError(f"cache_gb: must not be negative, got {self.cache_bytes!r}")
        if self.tertiary_bytes_per_s is not None and not self.tertiary_bytes_per_s > 0:
            raise ValueError("tertiary_mb_s: must be positive")
        if self.replicate_hot is not None:
            try:
                HotReplicator(self.replicate_hot)
            except ParamError as exc:
                raise ValueError(f"replicate_hot: {exc.reason}") from None


LOCAL_WORKER_CONFIG: dict[str, Any] = {"distributed.worker.profile.enabled": False}
"""Dask settings of the workers datasched starts on this machine."""

CLOSED_HTTP_CONFIG: dict[str, Any] = {
    "distributed.scheduler.http.routes": ["distributed.http.health"],
    "distributed.worker.http.routes": ["distributed.http.health"],
}
"""Dask's schedulers and workers always start an HTTP server; on the clusters datasched
starts it listens on loopback only (see :func:`open_cluster`) and answers ``/health`` only:
no dashboard, no metrics, no pages about the workers (docs/runtime.md, "A closed
cluster")."""

LOOPBACK = "127.0.0.1"

CONNECT_TIMEOUT_S = 30.0
WORKERS_TIMEOUT_S = 120.0
"""How long the service's confined local workers may take to start."""
"""How long joining an existing scheduler (``--scheduler``) may take before it is an error."""


@asynccontextmanager
async def open_cluster(opts: ClusterOptions) -> AsyncIterator[tuple[Client, list[str]]]:
    """A client and the worker names (node ids follow their sorted order), with the cache
    plugin registered on every worker (and on workers that join or restart later).

    A cluster started here (embedded or batch) is closed: ``tls://`` with credentials made
    for it (:func:`~datasched.runtime.tls.private_credentials`, removed when it closes),
    and its HTTP servers on loopback (docs/runtime.md, "A closed cluster")."""
    async with AsyncExitStack() as stack:  # unwinds: the client, the cluster, its credentials
        cluster, sec = await _start_cluster(opts, stack)
        client = await _connect(opts, cluster, sec)
        stack.push_async_callback(client.close)
        # Registered anew by every run (not idempotent): this run's cache directory, size
        # and throttle replace an earlier run's on a cluster that outlives it.
        plugin = CachePlugin(
            str(opts.cache_root.resolve()),
            opts.cache_bytes,
            tertiary_bytes_per_s=opts.tertiary_bytes_per_s,
            compute_slots=opts.slots,
        )
        # Their plugin is set up as they join: each is up before it is registered, so that
        # a cache directory one cannot make is an error here, not a log line there.
        if isinstance(cluster, ConfinedCluster):  # processes of their own: not up at once
            try:
                wait: Any = client.wait_for_workers  # the asynchronous client's: a coroutine
                await wait(opts.workers, timeout=WORKERS_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                raise ClusterSetupError(
                    f"--workers: the confined workers did not start within "
                    f"{WORKERS_TIMEOUT_S:g} s ({exc}); their errors are in the daemon's log"
                ) from exc
        try:
            registered = client.register_plugin(plugin, name=PLUGIN_NAME)
            if registered is not None:
                await registered
        except CacheDirError as exc:
            raise ClusterSetupError(f"--cache-dir: {exc}") from exc
        if opts.jobqueue is not None:
            await wait_for_jobs(client, opts.workers, opts.jobqueue, cluster)
        assert client.scheduler is not None
        info = await client.scheduler.identity()
        names = sorted(str(w.get("name")) for w in info.get("workers", {}).values())
        if not names:
            raise RuntimeError("the Dask cluster has no workers")
        yield client, names


async def _start_cluster(opts: ClusterOptions, stack: AsyncExitStack) -> tuple[Any, Any]:
    """The cluster to start here (a LocalCluster or a dask-jobqueue cluster, closed by
    ``stack``; ``None`` to join ``opts.scheduler_address``) and the security its client
    connects with (``None``: plain ``tcp://`` to a scheduler the user gave)."""
    if opts.scheduler_address is not None:
        return None, None if opts.tls is None else security(opts.tls)
    if opts.jobqueue is not None:
        # The batch jobs read the credentials by path: a directory the nodes share.
        where = opts.jobqueue.tls_dir
        try:
            creds = stack.enter_context(private_credentials(where))
        except OSError as exc:
            raise JobqueueError(
                f"--jobqueue-args: tls_dir: cannot make a private directory in {where}: "
                f"{exc.strerror or exc}"
            ) from exc
        sec = cluster_security(creds)
        with dask.config.set(CLOSED_HTTP_CONFIG):  # the scheduler is in this process
            cluster = await open_batch_cluster(
                opts.jobqueue,
                workers=opts.workers,
                threads=opts.slots,
                memory=opts.memory_limit,
                cache_bytes=opts.cache_bytes,
                security=sec,
            )
        stack.push_async_callback(_close, cluster)
        return cluster, sec
    check_cache_root(opts.cache_root)
    creds = stack.enter_context(private_credentials())
    sec = cluster_security(creds)
    conf = opts.confine_workers
    if conf is not None and conf.bwrap and conf.run_as is not None and os.geteuid() == 0:
        cluster = await confined_cluster(
            opts.workers,
            conf,
            creds,
            sec,
            nthreads=opts.slots * opts.threads_per_slot,
            memory_limit=opts.memory_limit,
            cache_root=opts.cache_root,
            roots=opts.worker_roots,
            http_config=CLOSED_HTTP_CONFIG,
            worker_config=LOCAL_WORKER_CONFIG,
            host=LOOPBACK,
        )
        stack.push_async_callback(_close, cluster)
        return cluster, sec
    # Our own workers have no dashboard to show Dask's statistical profiler: sampling every
    # thread's stack each 10 ms cost them about a fifth of their CPU outside packets
    # (docs/performance.md). The spawned workers take the config set here.
    with dask.config.set({**LOCAL_WORKER_CONFIG, **CLOSED_HTTP_CONFIG}):
        cluster = await LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=opts.workers,
            threads_per_worker=opts.slots * opts.threads_per_slot,
            processes=True,
            asynchronous=True,
            # The scheduler, the nannies and the workers on loopback, over TLS; the
            # workers' HTTP servers follow their host.
            host=LOOPBACK,
            protocol="tls://",
            security=sec,
            dashboard_address=None,
            # No dashboard; the HTTP server Dask starts anyway on a free loopback port
            # (8787 may be another's).
            scheduler_kwargs={"dashboard_address": f"{LOOPBACK}:0", "dashboard": False},
            memory_limit=opts.memory_limit,
            silence_logs=logging.ERROR,
        )
    stack.push_async_callback(_close, cluster)
    return cluster, sec


async def _connect(opts: ClusterOptions, cluster: Any, sec: Any) -> Client:
    """Datasched's client of ``cluster`` (or of the scheduler at ``opts.scheduler_address``:
    one that cannot be reached within :data:`CONNECT_TIMEOUT_S`, or refuses these
    credentials, is a :class:`ClusterSetupError` naming ``--scheduler``)."""
    client = Client(  # type: ignore[no-untyped-call]
        cluster if cluster is not None else opts.scheduler_address,
        asynchronous=True,
        security=sec,
        timeout=CONNECT_TIMEOUT_S,
        # A packet's result comes straight from its worker, not through the scheduler
        # (one hop, and no scheduler time a packet) when the workers run on this
        # machine; batch workers or a cluster's may not be reachable from here.
        direct_to_workers=True if isinstance(cluster, LocalCluster | ConfinedCluster) else None,
    )
    try:
        await client
    except BaseException as exc:
        # Closed here, awaited: a client left to the garbage collector would close itself
        # with a coroutine nobody awaits.
        with suppress(Exception):
            await client.close()  # type: ignore[no-untyped-call]
        address = opts.scheduler_address
        if address is not None and isinstance(exc, OSError | TimeoutError):
            why = " ".join(str(exc).split()) or type(exc).__name__
            hint = (
                " (a scheduler that requires TLS takes its tls:// address and --tls-ca-file, "
                "--tls-cert, --tls-key)"
                if not address.startswith("tls://")
                else ""
            )
            raise ClusterSetupError(
                f"--scheduler: cannot connect to {address}: {why}{hint}"
            ) from exc
        raise
    return client


async def _close(cluster: Any) -> None:
    if cluster is not None:
        closing = cluster.close()
        if closing is not None:
            await closing


def check_cache_root(root: Path) -> None:
    """The embedded cluster's workers share this machine: a cache root they cannot create is
    found here, before any worker starts."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ClusterSetupError(
            f"--cache-dir: cannot create {root}: {exc.strerror or exc}"
        ) from exc


async def cache_by_name(client: Client) -> dict[str, list[str]]:
    """What each worker caches: worker name -> URLs."""
    assert client.scheduler is not None
    info = await client.scheduler.identity()
    names = {addr: str(w.get("name")) for addr, w in info.get("workers", {}).items()}
    contents: dict[str, list[str]] = await client.run(cache_contents)
    return {names[addr]: urls for addr, urls in contents.items() if addr in names}
