"""How long a prediction from a live snapshot takes: a queue of N elementary jobs on M nodes
(some running, caches partly warm, rates measured on some nodes), predicted under each
policy; the median of a few repeats. Prints a table, or ``--json``.

    PYTHONPATH=src python benchmarks/whatif.py --jobs 1000 --nodes 32
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    NodeRates,
    NodeSnapshot,
)
from datasched.service.whatif import predict


def snapshot(
    n_jobs: int, n_nodes: int, *, files_per_job: int = 4, seed: int = 1
) -> ClusterSnapshot:
    """A synthetic live state: jobs over a pool of files (some shared between jobs), the
    first jobs running (one per node) and partly done, half the nodes measured."""
    rng = random.Random(seed)
    pool = [(f"root://store/f{i:05d}.root", rng.randint(20_000, 200_000)) for i in range(n_jobs)]
    nodes = []
    for i in range(n_nodes):
        rates = (
            NodeRates(
                cached_events_per_s=rng.uniform(4000, 6000),
                peer_events_per_s=rng.uniform(2000, 3000),
                tertiary_bytes_per_s=rng.uniform(50e6, 100e6),
            )
            if i % 2 == 0
            else NodeRates()
        )
        cached = tuple(u for u, _ in rng.sample(pool, k=min(len(pool), 20)))
        nodes.append(NodeSnapshot(f"w{i:03d}", 2, 50 * 10**9, cached, rates))
    jobs = []
    for j in range(n_jobs):
        files = []
        for url, n in rng.sample(pool, k=files_per_job):
            todo = ((n // 3, n),) if j < n_nodes else None
            files.append(FileTodo(url, n, n * 10_000, todo))
        node = nodes[j].name if j < n_nodes else None
        rid = f"r{j // 5}"
        job = JobSnapshot(
            f"{rid}.{j % 5}", rid, tuple(files), float(j), user=f"u{j % 7}", node=node
        )
        jobs.append(job)
    return ClusterSnapshot(float(n_jobs), tuple(nodes), tuple(jobs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--policies", default="farm,splitting,cache-splitting,out-of-order")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.nodes < 1 or args.repeat < 1:
        ap.error("--jobs, --nodes and --repeat must be at least 1")
    snap = snapshot(args.jobs, args.nodes)
    rows = []
    for policy in args.policies.split(","):
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            p = predict(snap, policy)
            times.append(time.perf_counter() - started)
        rows.append(
            {
                "policy": policy,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "makespan_s": p.makespan_s,
            }
        )
    if args.json:
        print(json.dumps({"jobs": args.jobs, "nodes": args.nodes, "runs": rows}))
        return 0
    print(f"prediction of {args.jobs} elementary jobs on {args.nodes} nodes (2 slots each)")
    print(f"{'policy':<18}{'median s':>10}{'fastest s':>11}{'makespan s':>13}")
    for r in rows:
        print(f"{r['policy']:<18}{r['median_s']:>10.3f}{r['min_s']:>11.3f}{r['makespan_s']:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
