"""Running jobs on a cluster: the embedded ``LocalCluster`` or an existing Dask scheduler.

:func:`run_jobs` is what ``datasched run`` and ``datasched demo`` call: it opens (or joins) the
cluster, registers the cache plugin, tells the core what the workers already cache, and runs
the jobs under a policy with :class:`~datasched.runtime.engine.RuntimeEngine`.
:func:`run_dask_map` runs the same packets as a plain Dask map with placement left to Dask
(as coffea's Dask executor does), through the same worker caches: the baseline.
:func:`predict_makespan` asks the simulator what the same jobs would take.
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

from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, CostModel, Job, Pipelining
from datasched.core.scheduler import Scheduler
from datasched.policies.registry import make_policy
from datasched.runtime.dataset import read_events
from datasched.runtime.engine import (
    EngineConfig,
    JobReport,
    PacketStat,
    ProgressSink,
    RunReport,
    RuntimeEngine,
)
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.processor import load_processor, merge, write_output
from datasched.runtime.space import EventSpace
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
    "calibrate_cost",
    "open_cluster",
    "predict_makespan",
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
    threads_per_worker: int = 2
    """Two threads: one packet's file can be fetched while the other computes."""
    cache_bytes: int = 2 * 10**9
    cache_root: Path = Path(".datasched-cache")
    scheduler_address: str | None = None
    tertiary_bytes_per_s: float | None = None
    memory_limit: str = "2GiB"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers: must be at least 1, got {self.workers!r}")
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
            threads_per_worker=opts.threads_per_worker,
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


def calibrate_cost(
    specs: list[JobSpec], space: EventSpace, tertiary_bytes_per_s: float | None
) -> CostModel:
    """The master's cost model: bytes per event from the files, CPU per event by timing the
    first job's processor, reading included, on a slice of its first file (the least of
    five runs), the tertiary rate from the throttle."""
    bytes_per_event = max(space.bytes_per_event, 1.0)
    cpu = 1e-5
    if specs and space.files:
        spec = specs[0]
        f = space.files[0]
        n = min(f.n_events, 2000)
        if n > 0:
            proc = load_processor(spec.processor, spec.base_dir)
            read_events(f.url, f.tree, 0, n)  # once untimed: open, page cache, imports
            times = []
            for _ in range(5):  # the least of five: this machine is shared and noisy
                t0 = time.perf_counter()
                proc.process(read_events(f.url, f.tree, 0, n))
                times.append(time.perf_counter() - t0)
            cpu = max(min(times) / n, 1e-7)
    return CostModel(
        cpu_s_per_event=cpu,
        bytes_per_event=bytes_per_event,
        disk_bytes_per_s=DISK_BYTES_PER_S,
        tertiary_bytes_per_s=tertiary_bytes_per_s or UNTHROTTLED_BYTES_PER_S,
        pipelining=Pipelining.TERTIARY,
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
    cost: CostModel | None = None,
) -> RunReport:
    """Run ``specs`` under ``policy``; ``cold`` empties the worker caches first."""
    space = EventSpace()
    for spec in specs:
        space.job_data(spec.dataset, spec.start, spec.stop)
    if cost is None:
        cost = calibrate_cost(specs, space, opts.tertiary_bytes_per_s)
    async with open_cluster(opts) as (client, names):
        if cold:
            await client.run(clear_cache)
        engine = RuntimeEngine(
            client,
            names,
            policy=policy,
            policy_params=policy_params,
            cache_bytes=opts.cache_bytes,
            cost=cost,
            cache_root=str(opts.cache_root.resolve()),
            config=config,
            progress=progress,
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
    space = EventSpace()
    data = [space.job_data(s.dataset, s.start, s.stop) for s in specs]
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
                    url=f.url,
                    tree=f.tree,
                    local_start=a - f.start,
                    local_stop=b - f.start,
                    file_bytes=f.n_bytes,
                    processor=spec.processor,
                    base_dir=str(spec.base_dir),
                )
                key = f"datasched-map-{run_id}-{pid}"
                futures.append((a, b, f.url, client.submit(run_packet, packet, key=key)))
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


def _packets(space: EventSpace, data: IntervalSet, size: int) -> list[tuple[int, int]]:
    """``data`` cut at file boundaries and every ``size`` events (coffea-style chunks)."""
    out = []
    for a, b in data:
        while a < b:
            f = space.files[space.file_at(a)]
            stop = min(b, f.stop, a + size)
            out.append((a, stop))
            a = stop
    return out


def predict_makespan(
    specs: list[JobSpec],
    opts: ClusterOptions,
    *,
    policy: str,
    cost: CostModel,
    policy_params: dict[str, Any] | None = None,
) -> float:
    """What the simulator predicts for the same jobs, cluster and (calibrated) costs, with
    empty caches."""
    from datasched.sim.engine import SimEngine

    space = EventSpace()
    jobs = [
        Job(i, s.submit_s, space.job_data(s.dataset, s.start, s.stop)) for i, s in enumerate(specs)
    ]
    cluster = ClusterSpec.uniform(opts.workers, opts.cache_bytes, cost)
    sched = Scheduler(cluster, make_policy(policy, **(policy_params or {})))
    sched.boundaries = [f.start for f in space.files]  # as the runtime cuts
    run = SimEngine(cluster, sched).run(jobs)
    return max((r.end_s for r in run.jobs), default=0.0)
