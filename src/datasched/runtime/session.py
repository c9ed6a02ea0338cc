"""Running jobs on a cluster: the embedded ``LocalCluster``, an existing Dask scheduler, or
workers started as batch jobs (:mod:`~datasched.runtime.batch`).

:func:`run_jobs` is what ``datasched run`` and ``datasched demo`` call: it opens (or joins) the
cluster, registers the cache plugin, builds the scheduling core for its workers (one node a
worker), tells it what the workers already cache, and runs the jobs under a policy with
:class:`~datasched.runtime.engine.RuntimeEngine`. The baseline, the same packets as a plain
Dask map, is :mod:`datasched.runtime.daskmap`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from distributed import Client

from datasched.core.data import DataSpace
from datasched.core.hot import HotReplicator
from datasched.core.model import CostModel, Pipelining, Topology
from datasched.core.packets import PacketSizing
from datasched.core.scheduler import Scheduler
from datasched.core.trace import TraceSink
from datasched.policies import build_policy
from datasched.runtime.calibrate import (
    CalibrationResult,
    RoundTrip,
    calibrate_packet,
    packet_round_trip,
)
from datasched.runtime.cluster import (
    ClusterOptions,
    ClusterSetupError,
    cache_by_name,
    check_cache_root,
    open_cluster,
)
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
from datasched.runtime.worker import (
    PacketError,
    PacketSpec,
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
ROUND_TRIP_TIMEOUT_S = 60.0
"""At most this long measuring the per-packet cost; past it, none is charged."""


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
    opening a new copy costs more (``CostModel.fresh_cpu_s_per_event``), and what a packet
    costs besides its events (tiny packets' round trips through the master and Dask, in
    CPU): the master's process's part, serial (``CostModel.master_s_per_packet``), and the
    worker's (``CostModel.packet_overhead_s``). Never in the
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
    try:
        trip = await asyncio.wait_for(
            packet_round_trip(client, packet, result.node), ROUND_TRIP_TIMEOUT_S
        )
    except (PacketError, TimeoutError) as exc:
        if log is not None:
            log(f"calibration: job {spec.id}: per-packet cost not measured: {exc or 'timed out'}")
        trip = RoundTrip(0.0, 0.0)
    cost = replace(
        cal.cost,
        fresh_cpu_s_per_event=fresh,
        packet_overhead_s=trip.worker_cpu_s,
        master_s_per_packet=trip.master_cpu_s,
    )
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
    trace: TraceSink | None = None,
) -> Scheduler:
    """The scheduling core for a cluster of ``n_workers`` Dask workers (one node each, with
    ``opts.slots`` slots and ``opts.cache_bytes`` of cache), the policy built by name from
    its declared parameters (adaptive delay brings its performance map); ``packets`` set its
    default packetizer (push policies' packet sizes, and the chunksize of all); ``trace``
    receives the scheduler's records (:mod:`datasched.core.trace`)."""
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
    return Scheduler(topology, space, built, cost=calibration.cost, replicator=hot, trace=trace)


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
    trace: TraceSink | None = None,
) -> RunReport:
    """Run ``specs`` under ``policy``; ``cold`` empties the worker caches first. Without a
    ``calibration``, the CPU per event is measured on a worker (``calibrate``), or guessed.
    ``trace`` receives the scheduler's records (events, transitions, actions)."""
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
            trace=trace,
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
