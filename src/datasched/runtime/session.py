"""Running jobs on a cluster: the embedded ``LocalCluster``, an existing Dask scheduler, or
workers started as batch jobs (:mod:`~datasched.runtime.batch`).

:func:`run_jobs` is what ``datasched run`` and ``datasched demo`` call: it opens (or joins) the
cluster, registers the cache plugin, builds the scheduling core for its workers (one node a
worker), tells it what the workers already cache, and runs the jobs under a policy with
:class:`~datasched.runtime.engine.RuntimeEngine`. The baseline, the same packets as a plain
Dask map, is :mod:`datasched.runtime.daskmap`.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dask.config
from distributed import Client, LocalCluster

from datasched.core.data import DataSpace
from datasched.core.hot import HotReplicator
from datasched.core.model import CostModel, Pipelining, Topology
from datasched.core.packets import PacketSizing
from datasched.core.policy import ParamError
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.runtime.batch import (
    JobqueueError,
    JobqueueSpec,
    open_batch_cluster,
    wait_for_jobs,
)
from datasched.runtime.calibrate import CalibrationResult, calibrate_packet
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec, job_processor
from datasched.runtime.outputs import merge, write_output
from datasched.runtime.reports import (
    EngineConfig,
    JobReport,
    ProgressSink,
    RunReport,
)
from datasched.runtime.space import job_events
from datasched.runtime.tls import TlsFiles, cluster_security, private_credentials, security
from datasched.runtime.worker import (
    PLUGIN_NAME,
    CacheDirError,
    CachePlugin,
    PacketError,
    PacketSpec,
    cache_contents,
    clear_cache,
)

__all__ = [
    "Calibration",
    "ClusterOptions",
    "ClusterSetupError",
    "build_scheduler",
    "cache_by_name",
    "calibrate_on_cluster",
    "check_cache_root",
    "default_calibration",
    "job_space",
    "open_cluster",
    "run_jobs",
]

DISK_BYTES_PER_S = 500e6
"""Assumed local-disk read rate for the master's estimates (only steers decisions)."""
UNTHROTTLED_BYTES_PER_S = 200e6
"""Assumed tertiary rate when no throttle is set."""
DEFAULT_CPU_S_PER_EVENT = 1e-4
"""The master's guess without calibration (``--no-calibrate``): packets then size themselves
from what they measure."""


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
        try:
            registered = client.register_plugin(plugin, name=PLUGIN_NAME)
            if registered is not None:
                await registered
        except CacheDirError as exc:
            raise ClusterSetupError(f"--cache-dir: {exc}") from exc
        if opts.jobqueue is not None:
            await wait_for_jobs(client, opts.workers, opts.jobqueue)
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
        direct_to_workers=True if isinstance(cluster, LocalCluster) else None,
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


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the master assumes of the cluster for its estimates: CPU per event (measured),
    disk and tertiary rates."""

    cost: CostModel
    tertiary_bytes_per_s: float
    measured: bool = False
    """Whether the CPU per event was measured on a worker (else a default guess)."""
    core_share: float = 1.0
    """The share of a core each node's CPU per event assumes: 1 as measured (the
    calibration runs alone); less once scaled for workers sharing fewer cores."""


def job_space(specs: list[JobSpec]) -> DataSpace:
    """The data space of the jobs' files (cached whole: real ROOT files)."""
    space = DataSpace()
    for spec in specs:
        job_events(space, spec.dataset, spec.start, spec.stop)
    return space


def default_calibration(
    tertiary_bytes_per_s: float | None, cpu_s_per_event: float = DEFAULT_CPU_S_PER_EVENT
) -> Calibration:
    """The master's assumptions without a measurement (``--no-calibrate``)."""
    cost = CostModel(
        cpu_s_per_event=cpu_s_per_event,
        disk_bytes_per_s=DISK_BYTES_PER_S,
        pipelining=Pipelining.TERTIARY,
    )
    return Calibration(cost, tertiary_bytes_per_s or UNTHROTTLED_BYTES_PER_S)


CALIBRATION_EVENTS = 2000


async def calibrate_on_cluster(
    client: Client,
    specs: list[JobSpec],
    space: DataSpace,
    tertiary_bytes_per_s: float | None,
    *,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """CPU per event, by timing the first job's packets on a worker: read and process a
    slice of its first file (read through that worker's cache, so the read is not wasted),
    the least CPU time of three runs with the file open from an earlier packet, and what
    opening a new copy costs more (``CostModel.fresh_cpu_s_per_event``). Never in the
    master: its reads would go to tertiary storage, and the user's code runs where it will
    run. A processor that fails here is reported by the job's own packets; the master then
    goes on with its default guess."""
    if not specs or not space.files:
        return default_calibration(tertiary_bytes_per_s)
    spec = specs[0]
    index, a, stop = spec.dataset.locate(spec.start, spec.stop)[0]
    first = spec.dataset.files[index]
    n = min(stop - a, CALIBRATION_EVENTS)
    _, shipped = job_processor(spec)
    packet = PacketSpec(
        packet_id=-1,
        job_id=-1,
        url=first.url,
        tree=first.tree,
        local_start=a,
        local_stop=a + n,
        file_bytes=first.n_bytes,
        processor=shipped,
        read=spec.read,
    )
    try:
        result: CalibrationResult = await client.submit(
            calibrate_packet, packet, key=f"datasched-calibrate-{uuid.uuid4().hex[:8]}", pure=False
        )
    except PacketError as exc:
        if log is not None:
            log(f"calibration: job {spec.id}: {exc.kind} error: {exc} (using a default guess)")
        return default_calibration(tertiary_bytes_per_s)
    cpu = max(result.cpu_s_per_event, 1e-7)
    cal = default_calibration(tertiary_bytes_per_s, cpu)
    # Opening a new copy is paid once per file a node reads: spread over the file's events.
    fresh = result.open_cpu_s / max(first.n_events, 1)
    cost = replace(cal.cost, fresh_cpu_s_per_event=fresh)
    return Calibration(cost, cal.tertiary_bytes_per_s, measured=True)


def build_scheduler(
    n_workers: int,
    opts: ClusterOptions,
    space: DataSpace,
    calibration: Calibration,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
    packets: PacketSizing | None = None,
) -> Scheduler:
    """The scheduling core for a cluster of ``n_workers`` Dask workers (one node each, with
    ``opts.slots`` slots and ``opts.cache_bytes`` of cache), the policy built by name from
    its declared parameters (adaptive delay brings its performance map); ``packets`` set its
    default packetizer (push policies' packet sizes, and the chunksize of all)."""
    topology = Topology.uniform(
        n_workers,
        opts.cache_bytes,
        slots=opts.slots,
        tertiary_bytes_per_s=calibration.tertiary_bytes_per_s,
    )
    built = build_policy(policy, **(policy_params or {}))
    if packets is not None:
        built.packet_sizing = packets
    hot = None if opts.replicate_hot is None else HotReplicator(opts.replicate_hot)
    return Scheduler(topology, space, built, cost=calibration.cost, replicator=hot)


async def run_jobs(
    specs: list[JobSpec],
    opts: ClusterOptions,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
    config: EngineConfig | None = None,
    packets: PacketSizing | None = None,
    progress: ProgressSink | None = None,
    cold: bool = False,
    calibration: Calibration | None = None,
    calibrate: bool = True,
    log: Callable[[str], None] | None = None,
    time_scale: float = 1.0,
) -> RunReport:
    """Run ``specs`` under ``policy``; ``cold`` empties the worker caches first. Without a
    ``calibration``, the CPU per event is measured on a worker (``calibrate``), or guessed."""
    space = job_space(specs)
    async with open_cluster(opts) as (client, names):
        if calibration is None:
            calibration = (
                await calibrate_on_cluster(client, specs, space, opts.tertiary_bytes_per_s, log=log)
                if calibrate
                else default_calibration(opts.tertiary_bytes_per_s)
            )
        if cold:
            await client.run(clear_cache)
        sched = build_scheduler(
            len(names),
            opts,
            space,
            calibration,
            policy=policy,
            policy_params=policy_params,
            packets=packets,
        )
        engine = RuntimeEngine(
            client,
            sched,
            names,
            config=config,
            progress=progress,
            time_scale=time_scale,
        )
        report = await engine.run(specs, known_cache=await cache_by_name(client))
        report.calibration = calibration
        return report


def _write_outputs(
    specs: list[JobSpec],
    reports: list[JobReport],
    accumulators: dict[str, Any],
    processors: dict[str, Any],
) -> dict[str, Any]:
    """Each output (a fileset's datasets together) merged, post-processed and written."""
    results: dict[str, Any] = {}
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.output_of, []).append(i)
    for out_id, members in groups.items():
        if any(reports[i].status != "completed" for i in members):
            continue
        acc: Any = None
        for i in members:
            acc = merge(acc, accumulators[specs[i].id])
        post = getattr(processors[specs[members[0]].id][0], "postprocess", None)
        try:
            if callable(post):  # coffea's rule: a postprocess returning None changes nothing
                done = post(acc)
                acc = acc if done is None else done
            write_output(acc, specs[members[0]].output)
            results[out_id] = acc
        except Exception as exc:
            for i in members:
                reports[i].status, reports[i].error = "failed", f"{type(exc).__name__}: {exc}"
    return results
