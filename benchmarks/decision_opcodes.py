"""Python bytecode instructions a scheduler decision executes, as the cluster grows: a
count of work that does not depend on the machine's load or caches (docs/performance.md).

``datasched scale`` and benchmarks/scale_all.py time each decision by a clock; on a busy
machine, and for decisions of a few microseconds, that time also grows with what the rest of
the simulation leaves in the processor's caches. This counts instead the opcodes the
interpreter runs inside the timed calls (the scheduler's handling of each event for a cluster
policy; ``choose`` or ``on_access`` for a grid scheduler), with ``sys.settrace``: a decision
whose count stays flat as the cluster grows does no pass over it. Work done inside one C call
(``sorted``, ``min`` of a list) counts as one opcode, so a flat count is read with the
profile beside it.

Usage: ``PYTHONPATH=src python benchmarks/decision_opcodes.py --policies sjf-data,JobAdaptive
[--nodes 10,1000] [--jobs 100] [--grid-jobs 200]``. Prints, per policy and size, the opcodes
per decision. Slow (the tracer runs per opcode): keep the runs small. ``PYTHONPATH`` picks the build
counted (another branch's ``src`` to compare).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from datasched.policies.grid.schedulers import grid_schedulers


class Counter:
    """Opcodes executed inside the wrapped calls, and how many calls."""

    def __init__(self) -> None:
        self.opcodes = 0
        self.calls = 0

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            self.opcodes += 1
        return self._trace

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            sys.settrace(self._trace)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.settrace(None)

        return call


def count(policy: str, nodes: int, jobs: int) -> Counter:
    counter = Counter()
    if policy in grid_schedulers():
        from datasched.gridsim.engine import GridSim
        from datasched.policies.grid.schedulers import (
            DATA_DO_NOTHING,
            JOB_DATA_PRESENT,
            DatasetScheduler,
            ExternalScheduler,
            build_grid_scheduler,
        )
        from datasched.studies.grid.scale import grid_config

        scheduler = build_grid_scheduler(policy)
        external: ExternalScheduler | DatasetScheduler
        data: ExternalScheduler | DatasetScheduler
        if isinstance(scheduler, ExternalScheduler):
            external, data = scheduler, build_grid_scheduler(DATA_DO_NOTHING)
            scheduler.choose = counter.wrap(scheduler.choose)  # type: ignore[method-assign]
        else:
            external, data = build_grid_scheduler(JOB_DATA_PRESENT), scheduler
            scheduler.on_access = counter.wrap(scheduler.on_access)  # type: ignore[method-assign]
        assert isinstance(external, ExternalScheduler)
        assert isinstance(data, DatasetScheduler)
        GridSim(grid_config(nodes, jobs), external, data).run()
        return counter
    from datasched.cli.options import make_config
    from datasched.core.model import Pipelining
    from datasched.core.scheduler import Scheduler
    from datasched.sim.experiment import simulate
    from datasched.studies.ponce.scale import scale_config

    base = make_config(
        policy,
        nodes=10,
        cache_gb=100.0,
        load=0.5,
        jobs=jobs,
        seed=0,
        pipeline=Pipelining.NONE,
        warmup=0.2,
        min_subjob=10,
        params=None,
    )
    handle = Scheduler.handle
    Scheduler.handle = counter.wrap(handle)  # type: ignore[method-assign]
    try:
        simulate(scale_config(base, nodes))
    finally:
        Scheduler.handle = handle  # type: ignore[method-assign]
    return counter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", required=True)
    ap.add_argument("--nodes", default="10,1000")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--grid-jobs", type=int, default=200)
    args = ap.parse_args()
    for policy in args.policies.split(","):
        cells = []
        for n in (int(x) for x in args.nodes.split(",")):
            jobs = args.grid_jobs if policy in grid_schedulers() else args.jobs
            c = count(policy, n, jobs)
            cells.append(f"{n}: {c.opcodes / max(c.calls, 1):.1f} opcodes/decision ({c.calls})")
        print(f"{policy}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
