"""The share of a core each of a run's threads gets on a machine other programs use too.

A calibration times the user's processor alone (CPU seconds an event). When the run's
workers share the machine's cores with each other and with other programs, each event takes
longer in wall time than its CPU time: the kernel shares the cores out among all the
threads that want one. The simulator models a node's CPU as the calibration's time per
event over this share (docs/performance.md, "Prediction on a shared machine").

The measurement: the number of runnable threads on the machine (``procs_running`` of
``/proc/stat``), sampled over a short window while the run's own workers are idle, less the
sampling thread itself, is what the other programs want of the cores. Under fair sharing,
``workers`` busy threads of the run beside ``others`` runnable threads of other programs on
``cores`` cores each get ``cores / (workers + others)`` of a core (at most one). Where
``/proc/stat`` cannot be read, the one-minute load average stands in for the samples.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MachineLoad", "core_share", "measure_machine_load", "runnable_threads"]


@dataclass(frozen=True, slots=True)
class MachineLoad:
    """What other programs want of this machine's cores, measured over a window."""

    cores: int
    others: float
    """Runnable threads of other programs, the window's mean (never negative)."""
    samples: int
    source: str
    """Where ``others`` came from: ``"procs_running"`` or ``"loadavg"``."""

    def share(self, threads: int) -> float:
        """Each of ``threads`` busy threads' share of a core beside the other programs."""
        return core_share(self.cores, threads, self.others)


def core_share(cores: int, threads: int, others: float = 0.0) -> float:
    """Each of ``threads`` busy threads' share of a core on ``cores`` cores, beside
    ``others`` runnable threads of other programs: fair sharing gives every runnable thread
    the same part, and no thread more than a whole core."""
    if cores < 1:
        raise ValueError(f"cores: must be at least 1, got {cores!r}")
    if threads < 1:
        raise ValueError(f"threads: must be at least 1, got {threads!r}")
    if not others >= 0:
        raise ValueError(f"others: must not be negative, got {others!r}")
    return min(1.0, cores / (threads + others))


def runnable_threads() -> int | None:
    """Runnable threads on the machine now (``procs_running``; None: not on Linux)."""
    try:
        with Path("/proc/stat").open(encoding="ascii") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def measure_machine_load(
    cores: int,
    *,
    window_s: float = 1.5,
    samples: int = 30,
    read: Callable[[], int | None] = runnable_threads,
    sleep: Callable[[float], None] = time.sleep,
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
) -> MachineLoad:
    """Sample the runnable threads ``samples`` times over ``window_s`` seconds, while the
    run's own threads are idle; each sample counts the sampling thread, which is not
    another program's. ``read``, ``sleep`` and ``loadavg`` are the machine's (a test gives
    its own)."""
    counts: list[int] = []
    for i in range(samples):
        got = read()
        if got is None:
            break
        counts.append(got)
        if i + 1 < samples:
            sleep(window_s / max(samples - 1, 1))
    if counts:
        others = max(statistics.fmean(counts) - 1.0, 0.0)
        return MachineLoad(cores, others, len(counts), "procs_running")
    return MachineLoad(cores, max(loadavg()[0], 0.0), 0, "loadavg")
