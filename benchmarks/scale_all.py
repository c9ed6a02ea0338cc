"""The master's work as the cluster grows, for every registered policy and the grid's
schedulers: ``datasched scale``'s measure (docs/scale.md), each point in a fresh process with
a time limit, timed by the CPU clock by default.

Usage: ``python benchmarks/scale_all.py [--policies a,b] [--nodes 10,100,1000] [--jobs 100]
[--packetizer-jobs 10] [--grid-jobs 200] [--clock cpu|wall] [--limit-s 400] [--src SRC]
[--json]`` (``--src``: another build's ``src``, e.g. the main branch's, to compare).

``--clock cpu`` times the scheduler by the process's CPU time instead of the wall clock: on a
machine shared with other work (the development machine often runs at a load of 10 or more
on two cores) the wall clock counts the time the process waits for a core, several times
the master's own work. Each point's process swaps ``time.perf_counter`` for
``time.process_time`` before it imports the simulator: a measuring device of this script
alone; the simulator itself always times by the wall clock. The packetizers decide once a
packet, hundreds of times more often than the others, so they run fewer jobs
(``--packetizer-jobs``). Printed are, per policy, each size's milliseconds per job,
microseconds per decision and master load, the nodes (sites) one core could serve as
master, extrapolated from the two largest sizes measured in time, and the load average when
each point began. A point over ``--limit-s`` is left out and said so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
PACKETIZERS = ("basic-packetizer", "adaptive-packetizer")


def _one(policy: str, nodes: int, jobs: int, clock: str) -> None:
    """One point, in this process: its ScalePoint as JSON on stdout."""
    if clock == "cpu":
        time.perf_counter = time.process_time  # before the simulator binds it
    from datasched.cli.options import make_config
    from datasched.core.model import Pipelining
    from datasched.policies.grid.schedulers import grid_schedulers
    from datasched.studies.ponce.scale import ScalePoint, scale_point

    point: ScalePoint
    if policy in grid_schedulers():
        from datasched.studies.grid.scale import grid_scale_point

        point = grid_scale_point(policy, nodes, jobs)
    else:
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
        point = scale_point(base, nodes)
    print(json.dumps({**asdict(point), "us_per_decision": point.us_per_decision}))


def _load() -> float:
    return os.getloadavg()[0]


def _measure(
    policy: str, nodes: int, jobs: int, clock: str, limit_s: float, src: Path = SRC
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--one", policy, str(nodes), str(jobs), clock]
    load = _load()
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return {"policy": policy, "n_nodes": nodes, "over_limit_s": limit_s, "load_avg": load}
    if done.returncode != 0:
        raise SystemExit(f"{policy} at {nodes}: {done.stderr.strip().splitlines()[-1]}")
    point: dict[str, Any] = json.loads(done.stdout)
    point["load_avg"] = load
    point["process_wall_s"] = time.perf_counter() - t0
    return point


def _per_core(points: list[dict[str, Any]]) -> float | str | None:
    from datasched.studies.ponce.scale import ScalePoint, nodes_per_core

    timed = [
        ScalePoint(**{k: p[k] for k in ScalePoint.__dataclass_fields__})
        for p in points
        if "master_load" in p
    ]
    served = nodes_per_core(timed)
    return "any" if served == math.inf else served


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--one":
        _one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    sys.path.insert(0, str(SRC))
    from datasched.policies import available
    from datasched.policies.grid.schedulers import grid_schedulers

    everything = [*available(), *grid_schedulers()]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(everything))
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--packetizer-jobs", type=int, default=10)
    ap.add_argument("--grid-jobs", type=int, default=200)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--limit-s", type=float, default=400.0)
    ap.add_argument("--src", type=Path, default=SRC, help="the build to time (another src/)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    for p in policies:
        if p not in everything:
            ap.error(f"--policies: {p!r} is not a registered policy or grid scheduler")
    try:
        sizes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        ap.error(f"--nodes: expected a comma list of whole numbers, got {args.nodes!r}")
    if any(n < 2 for n in sizes):
        ap.error("--nodes: sizes must be at least 2")
    report = []
    for policy in policies:
        jobs = (
            args.packetizer_jobs
            if policy in PACKETIZERS
            else args.grid_jobs
            if policy in grid_schedulers()
            else args.jobs
        )
        points = [_measure(policy, n, jobs, args.clock, args.limit_s, args.src) for n in sizes]
        row = {
            "policy": policy,
            "jobs": jobs,
            "points": points,
            "nodes_per_core": _per_core(points),
        }
        report.append(row)
        if not args.json:
            cells = []
            for p in points:
                if "master_load" not in p:
                    cells.append(f"{p['n_nodes']}: over {p['over_limit_s']:.0f} s")
                    continue
                cells.append(
                    f"{p['n_nodes']}: {1e3 * p['scheduler_s_per_job']:.3g} ms/job, "
                    f"{p['us_per_decision']:.3g} us/decision, load {p['master_load']:.2g} "
                    f"(load avg {p['load_avg']:.1f})"
                )
            served = row["nodes_per_core"]
            said = served if isinstance(served, str) or served is None else f"{served:.3g}"
            print(f"{policy} ({jobs} jobs, {args.clock} clock): nodes a core: {said}", flush=True)
            for cell in cells:
                print(f"    {cell}", flush=True)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
