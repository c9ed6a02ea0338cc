"""Running jobs on a cluster: the embedded ``LocalCluster`` or an existing Dask scheduler.

:func:`run_jobs` is what ``datasched run`` and ``datasched demo`` call: it opens (or joins) the
cluster, registers the cache plugin, builds the scheduling core for its workers (one node a
worker), tells it what the workers already cache, and runs the jobs under a policy with
:class:`~datasched.runtime.engine.RuntimeEngine`. :func:`run_dask_map` runs the same packets
as a plain Dask map with placement left to Dask (as coffea's Dask executor does), through the
same worker caches: the baseline.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Pipelining, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.runtime.dataset import read_events
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.processor import load_processor, merge, write_output
from datasched.runtime.reports import EngineConfig, JobReport, PacketStat, ProgressSink, RunReport
from datasched.runtime.space import job_events
from datasched.runtime.worker import (
    PLUGIN_NAME,
    CachePlugin,
    PacketResult,
    PacketSpec,
    cache_contents,
    clear_cache,
    run_packet,
)

__all__ = [
    "ClusterOptions",
    "build_scheduler",
    "calibrate",
    "job_space",
    "open_cluster",
    "run_dask_map",
    "run_jobs",
]

DISK_BYTES_PER_S = 500e6
"""Assumed local-disk read rate for the master's estimates (only steers decisions)."""
UNTHROTTLED_BYTES_PER_S = 200e6
"""Assumed tertiary rate when no throttle is set."""


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

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers: must be at least 1, got {self.workers!r}")
        if self.slots < 1:
            raise ValueError(f"slots: must be at least 1, got {self.slots!r}")
        if self.cache_bytes < 0:
            raise ValueError(f"cache_gb: must not be negative, got {self.cache_bytes!r}")
        if self.tertiary_bytes_per_s is not None and not self.tertiary_bytes_per_s > 0:
            raise ValueError("tertiary_mb_s: must be positive")


@asynccontextmanager
async def open_cluster(opts: ClusterOptions) -> AsyncIterator[tuple[Client, list[str]]]:
    """A client and the worker names (node ids follow their sorted order), with the cache
    plugin registered on every worker (and on workers that join or restart later)."""
    cluster: LocalCluster | None = None
    if opts.scheduler_address is None:
        cluster = await LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=opts.workers,
            threads_per_worker=opts.slots * opts.threads_per_slot,
            processes=True,
            asynchronous=True,
            dashboard_address=None,
            memory_limit=opts.memory_limit,
            silence_logs=logging.ERROR,
        )
        client = await Client(cluster, asynchronous=True)  # type: ignore[no-untyped-call]
    else:
        client = await Client(  # type: ignore[no-untyped-call]
            opts.scheduler_address, asynchronous=True
        )
    try:
        plugin = CachePlugin(
            str(opts.cache_root.resolve()),
            opts.cache_bytes,
            tertiary_bytes_per_s=opts.tertiary_bytes_per_s,
        )
        registered = client.register_plugin(plugin, name=PLUGIN_NAME)
        if registered is not None:
            await registered
        assert client.scheduler is not None
        info = await client.scheduler.identity()
        names = sorted(str(w.get("name")) for w in info.get("workers", {}).values())
        if not names:
            raise RuntimeError("the Dask cluster has no workers")
        yield client, names
    finally:
        await client.close()
        if cluster is not None:
            closing = cluster.close()
            if closing is not None:
                await closing


async def _cache_by_name(client: Client) -> dict[str, list[str]]:
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


def job_space(specs: list[JobSpec]) -> DataSpace:
    """The data space of the jobs' files (cached whole: real ROOT files)."""
    space = DataSpace()
    for spec in specs:
        job_events(space, spec.dataset, spec.start, spec.stop)
    return space


def calibrate(
    specs: list[JobSpec], space: DataSpace, tertiary_bytes_per_s: float | None
) -> Calibration:
    """CPU per event by timing the first job's processor, reading included, on a slice of
    its first file (the least of five runs); bytes come from the files, the tertiary rate
    from the throttle."""
    cpu = 1e-5
    if specs and space.files:
        spec = specs[0]
        f = space.files[0]
        n = min(f.n_events, 2000)
        if n > 0:
            proc = load_processor(spec.processor, spec.base_dir)
            read_events(f.name, f.tree, 0, n)  # once untimed: open, page cache, imports
            times = []
            for _ in range(5):  # the least of five: this machine is shared and noisy
                t0 = time.perf_counter()
                proc.process(read_events(f.name, f.tree, 0, n))
                times.append(time.perf_counter() - t0)
            cpu = max(min(times) / n, 1e-7)
    cost = CostModel(
        cpu_s_per_event=cpu, disk_bytes_per_s=DISK_BYTES_PER_S, pipelining=Pipelining.TERTIARY
    )
    return Calibration(cost, tertiary_bytes_per_s or UNTHROTTLED_BYTES_PER_S)


def build_scheduler(
    n_workers: int,
    opts: ClusterOptions,
    space: DataSpace,
    calibration: Calibration,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
) -> Scheduler:
    """The scheduling core for a cluster of ``n_workers`` Dask workers (one node each, with
    ``opts.slots`` slots and ``opts.cache_bytes`` of cache), the policy built by name from
    its declared parameters (adaptive delay brings its performance map)."""
    topology = Topology.uniform(
        n_workers,
        opts.cache_bytes,
        slots=opts.slots,
        tertiary_bytes_per_s=calibration.tertiary_bytes_per_s,
    )
    return Scheduler(
        topology, space, build_policy(policy, **(policy_params or {})), cost=calibration.cost
    )


async def run_jobs(
    specs: list[JobSpec],
    opts: ClusterOptions,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
    config: EngineConfig | None = None,
    progress: ProgressSink | None = None,
    cold: bool = False,
    calibration: Calibration | None = None,
    time_scale: float = 1.0,
) -> RunReport:
    """Run ``specs`` under ``policy``; ``cold`` empties the worker caches first."""
    space = job_space(specs)
    if calibration is None:
        calibration = calibrate(specs, space, opts.tertiary_bytes_per_s)
    async with open_cluster(opts) as (client, names):
        if cold:
            await client.run(clear_cache)
        sched = build_scheduler(
            len(names), opts, space, calibration, policy=policy, policy_params=policy_params
        )
        engine = RuntimeEngine(
            client,
            sched,
            names,
            cache_root=str(opts.cache_root.resolve()),
            config=config,
            progress=progress,
            time_scale=time_scale,
        )
        return await engine.run(specs, known_cache=await _cache_by_name(client))


async def run_dask_map(
    specs: list[JobSpec],
    opts: ClusterOptions,
    *,
    packet_events: int,
    progress: ProgressSink | None = None,
    cold: bool = False,
) -> RunReport:
    """The baseline: every job's packets submitted at its submission time with no placement
    (Dask picks the worker), read through the same worker caches."""
    space = DataSpace()
    data = [job_events(space, s.dataset, s.start, s.stop) for s in specs]
    run_id = uuid.uuid4().hex[:8]
    async with open_cluster(opts) as (client, _names):
        if cold:
            await client.run(clear_cache)
        t0 = time.monotonic()
        reports = [
            JobReport(id=s.id, events_expected=d.length, output=str(s.output))
            for s, d in zip(specs, data, strict=True)
        ]
        stats: list[PacketStat] = []
        results: dict[str, Any] = {}
        pid = 0

        async def one_job(i: int) -> None:
            nonlocal pid
            spec, report = specs[i], reports[i]
            await asyncio.sleep(max(spec.submit_s - (time.monotonic() - t0), 0.0))
            report.status = "running"
            if progress is not None:
                progress.job_started(spec.id, data[i].length)
            futures = []
            for a, b in _packets(space, data[i], packet_events):
                f = space.files[space.file_at(a)]
                pid += 1
                packet = PacketSpec(
                    packet_id=pid,
                    job_id=i,
                    url=f.name,
                    tree=f.tree,
                    local_start=a - f.start,
                    local_stop=b - f.start,
                    file_bytes=f.n_bytes,
                    processor=spec.processor,
                    base_dir=str(spec.base_dir),
                )
                key = f"datasched-map-{run_id}-{pid}"
                futures.append((a, b, f.name, client.submit(run_packet, packet, key=key)))
            start = time.monotonic() - t0
            acc: Any = None
            hits = 0
            try:
                for a, b, url, fut in futures:
                    res: PacketResult = await fut
                    acc = merge(acc, res.accumulator)
                    report.events_processed += b - a
                    report.bytes_from_tertiary += res.bytes_from_tertiary
                    hits += (b - a) if res.source == "cache" else 0
                    stats.append(
                        PacketStat(
                            spec.id,
                            res.node,
                            url,
                            a,
                            b,
                            res.source,
                            res.bytes_from_tertiary,
                            res.bytes_from_peer,
                            res.read_s,
                            res.compute_s,
                        )
                    )
                    if progress is not None:
                        progress.advance(spec.id, b - a, res.source == "cache")
                write_output(acc, spec.output)
                results[spec.id] = acc
                report.status = "completed"
            except Exception as exc:
                report.status, report.error = "failed", str(exc)
            now = time.monotonic() - t0
            report.wall_s = now - spec.submit_s
            report.wait_s = start - spec.submit_s
            n = report.events_processed
            report.cache_hit_ratio = hits / n if n else 0.0
            if progress is not None:
                progress.job_done(spec.id, report.status)

        await asyncio.gather(*(one_job(i) for i in range(len(specs))))
        makespan = max(
            (r.wall_s + s.submit_s for r, s in zip(reports, specs, strict=True)), default=0
        )
        return RunReport("dask-map", makespan, reports, stats, 0.0, results)


def _packets(space: DataSpace, data: IntervalSet, size: int) -> list[tuple[int, int]]:
    """``data`` cut at file boundaries and every ``size`` events (coffea-style chunks)."""
    out = []
    for a, b in data:
        while a < b:
            f = space.files[space.file_at(a)]
            stop = min(b, f.stop, a + size)
            out.append((a, stop))
            a = stop
    return out
