"""Timing the user's processor on a worker, before a run (the master's calibration).

The first job's packet is read through the worker's cache and processed as a packet does
it, with its file kept open from an earlier packet and opened afresh; the master turns the
times into its cost model's CPU per event and the cost of opening a new copy
(:func:`datasched.runtime.session.calibrate_on_cluster`). It also measures what a packet
costs besides its events, the round trip through the master and Dask
(:func:`packet_round_trip_cpu`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace

import psutil
from distributed import Client, get_worker

from datasched.runtime.events import forget_open_files
from datasched.runtime.worker import (
    PacketSpec,
    acquire_file,
    cache_plugin,
    process_events,
    release_file,
    run_packet,
)

__all__ = ["CalibrationResult", "calibrate_packet", "packet_round_trip_cpu"]

ROUND_TRIPS = 5
"""Tiny packets timed for the per-packet cost (after one untimed)."""


@dataclass(slots=True)
class CalibrationResult:
    """A processor timed on a worker: CPU seconds per event with the file already open, the
    CPU of opening it, and what its file read did."""

    node: str
    n_events: int
    cpu_s_per_event: float
    cache_added: list[str] = field(default_factory=list)
    open_cpu_s: float = 0.0
    """CPU seconds a packet of a newly opened copy pays more: the file and its tree's
    header (the least cold run less the least warm one; never negative)."""


def calibrate_packet(spec: PacketSpec, repeats: int = 3) -> CalibrationResult:
    """Time the packet's whole work on its events, as a packet does it: read the branches
    the processor uses and process them (the file fetched once, through the node's cache),
    with the file kept open from an earlier packet (warm), and with the file opened afresh
    (cold): the difference is what opening it costs. The least CPU time of ``repeats`` runs
    of each counts (this machine may be shared), per event for the warm ones: a packet's
    fixed cost is part of what an event costs at this packet size."""
    worker = get_worker()
    node, plugin = cache_plugin(worker)
    got, keep, _, _ = acquire_file(node, plugin, spec, worker)
    try:
        path = str(got.path) if got is not None else spec.url
        process_events(spec, path)  # once untimed: imports, page cache
        warm = cold = float("inf")
        for _ in range(repeats):
            cpu0 = time.thread_time()
            process_events(spec, path)  # the file kept open by the run before
            warm = min(warm, time.thread_time() - cpu0)
            forget_open_files()
            cpu0 = time.thread_time()
            process_events(spec, path)  # opened afresh, as a packet of a new copy does
            cold = min(cold, time.thread_time() - cpu0)
    finally:
        release_file(plugin, got, keep)
    n = spec.local_stop - spec.local_start
    return CalibrationResult(
        node,
        n,
        warm / max(n, 1),
        got.added if got is not None else [],
        open_cpu_s=max(cold - warm, 0.0),
    )


def _whereabouts() -> tuple[int, str]:
    """This worker's process id and host (a Dask task)."""
    return os.getpid(), socket.gethostname()


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def packet_round_trip_cpu(
    client: Client, spec: PacketSpec, node: str, n: int = ROUND_TRIPS
) -> float:
    """CPU seconds a packet costs besides its events (``CostModel.packet_overhead_s``):
    ``n`` packets of one event each, sent one after the other to ``node`` as the runtime
    sends a packet, and the CPU the master's process (client and embedded scheduler) and
    the worker's process used meanwhile, less the packets' own thread time (reading and
    processing their event), per packet. CPU, not wall time, so the machine's load does not
    inflate it (the simulator shares it out with the rest, docs/performance.md); a worker
    on another host is not counted (only the master's part). ``spec``'s file should be in
    ``node``'s cache (as the calibration leaves it); 0 when no worker has that name."""
    assert client.scheduler is not None
    info = await client.scheduler.identity()
    # Dask pins by address; a node is a worker's name (a LocalCluster's are numbers).
    found = [a for a, w in info.get("workers", {}).items() if str(w.get("name")) == node]
    if not found:
        return 0.0
    address = found[0]
    pid, host = await client.submit(
        _whereabouts,
        key=f"datasched-where-{uuid.uuid4().hex[:8]}",
        pure=False,
        workers=[address],
        allow_other_workers=False,
    )
    procs = [psutil.Process()]
    if host == socket.gethostname() and pid != os.getpid() and psutil.pid_exists(pid):
        procs.append(psutil.Process(pid))
    tiny = replace(spec, local_stop=spec.local_start + 1)

    async def one(k: int) -> float:
        result = await client.submit(
            run_packet,
            replace(tiny, packet_id=-2 - k),
            key=f"datasched-roundtrip-{uuid.uuid4().hex[:8]}",
            pure=False,
            workers=[address],
            allow_other_workers=False,
        )
        return float(result.cpu_s)

    await one(0)  # untimed: the processor's first call, the connection
    before = sum(_cpu_s(p) for p in procs)
    own = 0.0
    for k in range(n):
        own += await one(k + 1)
    used = sum(_cpu_s(p) for p in procs) - before
    return max(used - own, 0.0) / max(n, 1)
