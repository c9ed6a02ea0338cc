"""Timing the user's processor on a worker, before a run (the master's calibration).

The first job's packet is read through the worker's cache and processed as a packet does
it, with its file kept open from an earlier packet and opened afresh; the master turns the
times into its cost model's CPU per event and the cost of opening a new copy
(:func:`datasched.runtime.session.calibrate_on_cluster`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from distributed import get_worker

from datasched.runtime.events import forget_open_files
from datasched.runtime.worker import (
    PacketSpec,
    acquire_file,
    cache_plugin,
    process_events,
    release_file,
)

__all__ = ["CalibrationResult", "calibrate_packet"]


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
