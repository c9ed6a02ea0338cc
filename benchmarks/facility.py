"""A year of a facility: how long the simulator takes to plan one (goal: a year of a 1,000-node
cluster in under 10 minutes under out-of-order; docs/performance.md says where it stands).

The facility is the paper's cluster grown (ponce-hersch §2.4 per node: 100 GB of cache, 1 MB/s
to tertiary storage, 10 MB/s disks, 600 KB and 0.2 s of CPU per event; jobs of 40,000 events
on average), with the load and the data space scaled with the node count as §8 scales them
(0.5 jobs/h and 2 TB per 10 nodes: a load every Ponce policy sustains). Its workload is a
year of arrivals (438,000 jobs at 1,000 nodes). Each policy runs it for at most ``--limit-s``
seconds of wall-clock time; the simulated time it reached gives simulated days per wall-clock
minute and the projection for the whole year. Setting up (drawing the year's jobs) is timed
apart and not counted.

    python benchmarks/facility.py [--nodes 1000] [--days 365] [--limit-s 60]
        [--policies farm,...] [--load 0.5] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from datasched.policies.registry import available
from datasched.sim.experiment import SimConfig, SimProgress, simulate
from datasched.sim.workload import JobRecord

PONCE_POLICIES = (
    "farm",
    "splitting",
    "cache-splitting",
    "out-of-order",
    "delayed",
    "adaptive-delay",
)
DAY_S = 86400.0
YEAR_DAYS = 365.0


class _TimeUp(Exception):
    """The wall-clock limit is reached: where the run stood."""

    def __init__(self, progress: SimProgress) -> None:
        super().__init__("time up")
        self.progress = progress


def facility_config(policy: str, nodes: int, days: float, load_per_10: float) -> SimConfig:
    """The facility's run: ``days`` of arrivals on ``nodes`` nodes, load and data space
    grown with the node count (the queue's bound lifted: a slow run is not an overload)."""
    load = load_per_10 * nodes / 10
    return SimConfig(
        policy=policy,
        n_nodes=nodes,
        load_jobs_per_h=load,
        data_space_bytes=2e12 * nodes / 10,
        n_jobs=max(math.ceil(load * days * 24), 1),
        max_backlog=10**9,
    )


def run_policy(
    config: SimConfig, limit_s: float, records: list[JobRecord], setup_s: float
) -> dict[str, Any]:
    """Run ``config`` on ``records`` until it ends or ``limit_s`` of wall-clock time pass;
    the pace, and the projection for a year."""

    cpu0 = time.process_time()

    def watch(p: SimProgress) -> None:
        # A report after every job ended is the run's wrap-up: it is let finish, so a run
        # stopped by the limit always has jobs left (on a busy machine the limit once fell
        # between the last job's end and the run's).
        if p.wall_s >= limit_s and p.jobs_ended < config.n_jobs:
            raise _TimeUp(p)

    finished = True
    try:
        summary, run = simulate(config, records, on_progress=watch, progress_every_s=0.2)
        sim_s, wall_s, ended = run.end_s, summary.wall_s, run.jobs_completed + run.jobs_failed
    except _TimeUp as up:
        finished = False
        sim_s, wall_s, ended = up.progress.sim_s, up.progress.wall_s, up.progress.jobs_ended
    # CPU time of the whole call (its few seconds of set-up included): on a shared machine
    # it says what the run would take alone, where the wall-clock time says what it took.
    cpu_s = time.process_time() - cpu0
    sim_days = sim_s / DAY_S
    per_min = sim_days / (wall_s / 60) if wall_s > 0 else math.inf
    return {
        "policy": config.policy,
        "nodes": config.n_nodes,
        "jobs_in_workload": config.n_jobs,
        "jobs_ended": ended,
        "finished": finished,
        "sim_days": round(sim_days, 3),
        "wall_s": round(wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "sim_days_per_cpu_min": sim_days / (cpu_s / 60) if cpu_s > 0 else math.inf,
        "setup_s": round(setup_s, 2),
        "load_jobs_per_h": config.load_jobs_per_h,
        "sim_days_per_wall_min": per_min,
        "projected_year_wall_min": YEAR_DAYS / per_min if per_min > 0 else math.inf,
    }


def _fail(option: str, reason: str) -> None:
    print(f"error: {option}: {reason}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=float, default=YEAR_DAYS, help="simulated span")
    parser.add_argument(
        "--limit-s", type=float, default=60.0, help="wall-clock seconds per policy at most"
    )
    parser.add_argument("--policies", default=",".join(PONCE_POLICIES), help="comma-separated")
    parser.add_argument("--load", type=float, default=0.5, help="jobs/h per 10 nodes")
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    args = parser.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    known = available()
    if not policies:
        _fail("--policies", "no policy given")
    for p in policies:
        if p not in known:
            _fail("--policies", f"unknown policy {p!r} (known: {', '.join(sorted(known))})")
    if args.nodes < 1:
        _fail("--nodes", f"must be at least 1, got {args.nodes}")
    for option, value in (
        ("--days", args.days),
        ("--limit-s", args.limit_s),
        ("--load", args.load),
    ):
        if not (math.isfinite(value) and value > 0):
            _fail(option, f"must be a positive number, got {value}")
    rows = []
    t0 = time.perf_counter()
    records = facility_config(policies[0], args.nodes, args.days, args.load).records()
    setup_s = time.perf_counter() - t0  # the same jobs for every policy: drawn once
    for policy in policies:
        config = facility_config(policy, args.nodes, args.days, args.load)
        row = run_policy(config, args.limit_s, records, setup_s)
        rows.append(row)
        if not args.json:
            what = "the whole span" if row["finished"] else f"{row['sim_days']:.2f} days"
            print(
                f"{policy:16s} {row['sim_days_per_wall_min']:9.3f} simulated days per minute "
                f"({what} in {row['wall_s']:.0f} s): a year in about "
                f"{row['projected_year_wall_min']:,.0f} min",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
