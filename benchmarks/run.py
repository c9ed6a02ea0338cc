"""Simulator throughput benchmark (targets: 5,000-job runs under 5 s, 12-load sweeps under 60 s).

Prints, for each policy at 10 and 100 nodes, simulated jobs per wall-clock second and scheduler
events per second, and the ratio of the cost per event to a bare ``heapq`` event loop timed in
the same run (this machine is shared and noisy: ratios travel, seconds do not).

    python benchmarks/run.py [--jobs 5000] [--quick]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import time
from dataclasses import replace

from datasched.sim.experiment import SimConfig, simulate, sweep

POLICIES = ("farm", "splitting", "cache-splitting", "out-of-order", "delayed")
SWEEP_POLICIES = ("farm", "splitting", "cache-splitting")


def bare_heapq_loop(n_events: int) -> float:
    """Seconds per event of a minimal (time, seq) heap loop: push one, pop one."""
    heap: list[tuple[float, int, int]] = []
    seq = itertools.count()
    for i in range(64):
        heapq.heappush(heap, (float(i), next(seq), i))
    t0 = time.perf_counter()
    for _ in range(n_events):
        t, _, payload = heapq.heappop(heap)
        heapq.heappush(heap, (t + 1.5, next(seq), payload))
    return (time.perf_counter() - t0) / n_events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="fewer jobs, no sweep")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    n_jobs = 1000 if args.quick else args.jobs
    base = bare_heapq_loop(200_000)
    rows = []
    for nodes in (10, 100):
        # 100-node runs use a fifth of the jobs: job splitting's per-job cost grows with the
        # number of nodes (ponce-hersch Table 5), and the figure is per job anyway.
        jobs_here = n_jobs if nodes == 10 else max(n_jobs // 5, 200)
        for policy in POLICIES:
            # Load and data space grow with the cluster (ponce-hersch §8), at a moderate load
            # that every policy sustains.
            config = SimConfig(
                policy=policy,
                n_nodes=nodes,
                cache_gb=100.0,
                load_jobs_per_h=0.5 * nodes / 10,
                data_space_bytes=2e12 * nodes / 10,
                n_jobs=jobs_here,
                max_backlog=10**9,
            )
            summary, run = simulate(config)
            per_event = summary.wall_s / max(run.n_events_handled, 1)
            rows.append(
                {
                    "policy": policy,
                    "nodes": nodes,
                    "jobs": jobs_here,
                    "wall_s": round(summary.wall_s, 3),
                    "jobs_per_s": round(jobs_here / summary.wall_s, 1),
                    "events_per_s": round(run.n_events_handled / summary.wall_s),
                    "cost_vs_bare_heapq": round(per_event / base, 1),
                }
            )
    sweep_s = None
    if not args.quick:
        loads = [0.1 + 0.1 * i for i in range(12)]
        configs = [
            SimConfig(policy=p, load_jobs_per_h=load, n_jobs=500, cache_gb=100.0)
            for p in SWEEP_POLICIES
            for load in loads
        ]
        t0 = time.perf_counter()
        sweep([replace(c) for c in configs])
        sweep_s = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"bare_heapq_s_per_event": base, "runs": rows, "sweep_s": sweep_s}))
        return
    print(f"bare heapq loop: {base * 1e9:.0f} ns per event")
    header = f"{'policy':<16}{'nodes':>6}{'jobs':>7}{'wall s':>9}{'jobs/s':>10}"
    print(header + f"{'events/s':>11}{'x heapq':>9}")
    for r in rows:
        print(
            f"{r['policy']:<16}{r['nodes']:>6}{r['jobs']:>7}{r['wall_s']:>9}{r['jobs_per_s']:>10}"
            f"{r['events_per_s']:>11}{r['cost_vs_bare_heapq']:>9}"
        )
    if sweep_s is not None:
        print(f"sweep of 3 policies x 12 loads x 500 jobs: {sweep_s:.1f} s")


if __name__ == "__main__":
    main()
