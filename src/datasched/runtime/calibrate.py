"""Timing the user's processor on a worker, before a run (the master's calibration).

The first job's packet is read through the worker's cache and processed as a packet does
it, with its file kept open from an earlier packet and opened afresh; the master turns the
times into its cost model's CPU per event and the cost of opening a new copy
(:func:`datasched.runtime.session.calibrate_on_cluster`). It also measures what a packet
costs besides its events, the round trip through the master and Dask, in the master's
process and in the worker's apart (:func:`packet_round_trip`): the master's part is
serial, one packet at a time, the worker's is not.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import NamedTuple

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

__all__ = [
    "CalibrationResult",
    "RoundTrip",
    "calibrate_packet",
    "packet_round_trip",
    "packet_round_trip_cpu",
]

ROUND_TRIPS = 24
"""Tiny packets timed for the per-packet cost (after one untimed)."""
ROUND_TRIP_GROUPS = 3
"""Groups the timed packets are measured in; the cheapest group's cost a packet is taken.
Processes' CPU is counted in ticks of 10 ms, and anything else a process does meanwhile
(a collection, a thread of an earlier cluster closing) only ever adds to it: with five
packets timed together, six calibrations in a row read the master's part as 6 to 16 ms a
packet, and a master's part read several times too high would bound a whole prediction
(docs/performance.md, the runtime's "Latest figures")."""


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
    """A process's CPU seconds: this process's from its own clock (nanoseconds), another's
    from the kernel's counts (ticks of 10 ms)."""
    if proc.pid == os.getpid():
        return time.process_time()
    times = proc.cpu_times()
    return float(times.user + times.system)


class RoundTrip(NamedTuple):
    """CPU seconds a packet costs besides its events, by process."""

    master_cpu_s: float
    """In the master's process (client and Dask's scheduler): serial, one packet at a
    time (``CostModel.master_s_per_packet``)."""
    worker_cpu_s: float
    """In the worker's process besides the packet's own thread (its event loop, comms):
    in parallel with the other workers' (``CostModel.packet_overhead_s``)."""

    @property
    def total_s(self) -> float:
        return self.master_cpu_s + self.worker_cpu_s


async def packet_round_trip_cpu(
    client: Client, spec: PacketSpec, node: str, n: int = ROUND_TRIPS
) -> float:
    """CPU seconds a packet costs besides its events, in the master's and the worker's
    processes together (:func:`packet_round_trip`)."""
    return (await packet_round_trip(client, spec, node, n)).total_s


async def packet_round_trip(
    client: Client,
    spec: PacketSpec,
    node: str,
    n: int = ROUND_TRIPS,
    groups: int = ROUND_TRIP_GROUPS,
) -> RoundTrip:
    """CPU seconds a packet costs besides its events: ``n`` packets of one event each, sent
    one after the other to ``node`` as the runtime sends a packet, and the CPU the master's
    process (client and embedded scheduler) and the worker's process each used meanwhile,
    per packet, less the packets' own thread time (reading and processing their event) in
    the process they ran in. CPU, not wall time, so the machine's load does not inflate it
    (the simulator gives it the share of a core the run gets, docs/performance.md); a
    worker on another host is not counted (only the master's part), and one in the
    master's process is counted as the master's. The packets are timed in ``groups``
    (:data:`ROUND_TRIP_GROUPS`) and each process's cheapest group a packet is taken: other
    work in a process only adds CPU. ``spec``'s file should be in ``node``'s cache (as the
    calibration leaves it); nothing when no worker has that name."""
    assert client.scheduler is not None
    info = await client.scheduler.identity()
    # Dask pins by address; a node is a worker's name (a LocalCluster's are numbers).
    found = [a for a, w in info.get("workers", {}).items() if str(w.get("name")) == node]
    if not found:
        return RoundTrip(0.0, 0.0)
    address = found[0]
    pid, host = await client.submit(
        _whereabouts,
        key=f"datasched-where-{uuid.uuid4().hex[:8]}",
        pure=False,
        workers=[address],
        allow_other_workers=False,
    )
    master = psutil.Process()
    worker = None
    if host == socket.gethostname() and pid != os.getpid() and psutil.pid_exists(pid):
        worker = psutil.Process(pid)
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
    n = max(n, 1)
    groups = max(1, min(groups, n))
    sizes = [n // groups + (1 if g < n % groups else 0) for g in range(groups)]
    masters: list[float] = []
    workers: list[float] = []
    k = 0
    for size in sizes:
        master_before = _cpu_s(master)
        worker_before = _cpu_s(worker) if worker is not None else 0.0
        own = 0.0
        for _ in range(size):
            k += 1
            own += await one(k)
        in_master = _cpu_s(master) - master_before
        in_worker = _cpu_s(worker) - worker_before if worker is not None else 0.0
        if worker is not None:
            in_worker -= own
        else:
            in_master -= own
        masters.append(max(in_master, 0.0) / size)
        workers.append(max(in_worker, 0.0) / size)
    return RoundTrip(min(masters), min(workers))
