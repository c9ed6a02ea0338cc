"""The baseline of the demo and the benchmarks: the same packets as a plain Dask map, with
placement left to Dask (as coffea's Dask executor does), read through the same worker caches.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.runtime.cachefaults import CacheFaults
from datasched.runtime.jobspec import JobSpec, job_processor
from datasched.runtime.outputs import merge
from datasched.runtime.reports import JobReport, PacketStat, ProgressSink, RunReport, tell_packet
from datasched.runtime.session import ClusterOptions, _write_outputs, open_cluster
from datasched.runtime.space import job_events
from datasched.runtime.worker import PacketResult, PacketSpec, clear_cache, run_packet

__all__ = ["run_dask_map"]


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
    shipped = {s.id: job_processor(s) for s in specs}
    async with open_cluster(opts) as (client, names):
        if cold:
            await client.run(clear_cache)
        t0 = time.monotonic()
        t0_wall = time.time()
        reports = [
            JobReport(id=s.id, events_expected=d.length, output=str(s.output))
            for s, d in zip(specs, data, strict=True)
        ]
        stats: list[PacketStat] = []
        accumulators: dict[str, Any] = {}
        faults = CacheFaults()
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
                    processor=shipped[spec.id][1],
                    read=spec.read,
                )
                key = f"datasched-map-{run_id}-{pid}"
                futures.append((a, b, f.name, client.submit(run_packet, packet, key=key)))
            start = time.monotonic() - t0
            acc: Any = None
            hits = 0
            try:
                for a, b, url, fut in futures:
                    res: PacketResult = await fut
                    faults.packet(res.node, url, res.source, res.cache_corrupted)
                    acc = merge(acc, res.accumulator)
                    report.events_processed += b - a
                    report.bytes_from_tertiary += res.bytes_from_tertiary
                    hits += (b - a) if res.source == "cache" else 0
                    stat = PacketStat(
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
                        res.bytes_read,
                        res.cpu_s,
                        max(res.started - t0_wall, 0.0),
                        time.monotonic() - t0,
                        t_slot=(None if res.slot_at is None else max(res.slot_at - t0_wall, 0.0)),
                    )
                    stats.append(stat)
                    if progress is not None:
                        progress.advance(spec.id, b - a, res.source == "cache")
                        tell_packet(progress, stat)
                accumulators[spec.id] = acc
                report.status = "completed"
            except Exception as exc:
                report.status, report.error = "failed", str(exc)
                report.traceback = getattr(exc, "traceback", "")
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
        results = _write_outputs(specs, reports, accumulators, shipped)
        return RunReport(
            "dask-map",
            makespan,
            reports,
            stats,
            0.0,
            results,
            notes=faults.notes(),
            cache_faults=faults.as_dict(),
            workers=list(names),
            started_wall=t0_wall,
        )


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
