"""The largest simulation the simulator takes: past these sizes a run would fill a
workstation's memory while it is set up, before its first event (a run allocates per slot
and per job), and be killed by the kernel minutes later. :class:`~datasched.sim.experiment.
SimConfig` refuses them at once, naming the field (docs/cli.md)."""

from __future__ import annotations

__all__ = ["MAX_JOBS", "MAX_SLOTS", "size_problem"]

MAX_SLOTS = 1_000_000
"""The most slots (nodes times slots per node) a simulated cluster may have."""
MAX_JOBS = 10_000_000
"""The most jobs a run may have (1,000,000 jobs' records take some 300 MB; a year of a
1,000-node facility is 438,000 jobs)."""


def size_problem(n_nodes: int, slots: int, n_jobs: int) -> tuple[str, str] | None:
    """``(field, reason)`` when the sizes are past the largest run; None when they are not."""
    if n_nodes * slots > MAX_SLOTS:
        return (
            "slots" if slots > n_nodes else "n_nodes",
            f"{n_nodes} nodes of {slots} slots is more than the {MAX_SLOTS:,} slots a "
            "simulation may have (each takes memory before the run begins)",
        )
    if n_jobs > MAX_JOBS:
        return (
            "n_jobs",
            f"{n_jobs} is more than the {MAX_JOBS:,} jobs a run may have (their records "
            "alone take some 3 GB at that size; a year of a 1,000-node facility is 438,000)",
        )
    return None
