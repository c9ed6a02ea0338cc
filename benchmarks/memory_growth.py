"""What grows in a simulation's memory as jobs go by, sampled every few jobs.

A 1,000-node, 10,000-job run takes over an hour of CPU; its caches only fill after some 4,500
jobs. With caches a tenth or a twentieth of the size (``--cache-gb``) the same configuration
(``benchmarks/run.py``'s, otherwise unchanged) reaches the caches' steady state after a few
hundred jobs, and shows whether the resident set levels off once they are full or keeps
growing with the jobs (docs/performance.md, "Memory at the caches' steady state").

Every ``--every`` jobs ended it prints one line: jobs ended, CPU seconds, the resident set
(MB), how full the caches are, the caches' extents and heap entries, the scheduler's cache
directory (segments, per-node ranges, interned holder sets), the simulator's own directory
when it keeps one, the bytes of the resident set per cached extent over the first sample's,
and the interpreter's allocated blocks (``sys.getallocatedblocks``: live objects, which the
resident set follows). With ``--containers`` it also names every list, dict, set or deque
reachable from the engine, scheduler and policy (two attributes deep) that grew since the
last sample; with
``--tracemalloc`` the allocation sites (file:line) whose memory grew most (tracemalloc itself
doubles the run's time and adds its own memory: leave it off for the resident set's figures).

    python benchmarks/memory_growth.py [--policy out-of-order] [--nodes 1000] [--jobs 600]
        [--cache-gb 5] [--every 50] [--containers] [--tracemalloc] [--top 12] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import bench_config  # noqa: E402

from datasched.core.cache import RangeCache  # noqa: E402
from datasched.core.directory import CacheDirectory  # noqa: E402
from datasched.core.scheduler import Scheduler  # noqa: E402
from datasched.policies.registry import available, build_policy  # noqa: E402
from datasched.sim.engine import SimEngine  # noqa: E402
from datasched.sim.experiment import jobs_from_records  # noqa: E402


def rss_mb() -> float:
    """The process's resident set now (Linux), in MB."""
    with Path("/proc/self/status").open() as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def directory_counts(d: CacheDirectory | None) -> dict[str, int]:
    if d is None:
        return {}
    return {
        "segments": d.n_segments,
        "node_ranges": sum(len(s) for s in d._starts_of),
        "sets": len(d._sets),
    }


def containers(roots: dict[str, Any], depth: int = 2) -> dict[str, int]:
    """``path -> len`` of every list, dict, set and deque reachable from ``roots`` through
    attributes (``__dict__`` or ``__slots__``), ``depth`` attributes deep."""
    out: dict[str, int] = {}
    seen: set[int] = set()

    def attrs(obj: Any) -> list[tuple[str, Any]]:
        names: list[str] = []
        if hasattr(obj, "__dict__"):
            names += list(vars(obj))
        for cls in type(obj).__mro__:
            names += [s for s in getattr(cls, "__slots__", ()) if isinstance(s, str)]
        return [(n, getattr(obj, n, None)) for n in dict.fromkeys(names)]

    def walk(path: str, obj: Any, left: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, list | dict | set | frozenset | collections.deque):
            out[path] = len(obj)
            return
        if left == 0 or isinstance(obj, int | float | str | bytes | type) or obj is None:
            return
        if type(obj).__module__.startswith("datasched"):
            for name, value in attrs(obj):
                walk(f"{path}.{name}", value, left - 1)

    for name, root in roots.items():
        walk(name, root, depth)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="out-of-order")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=600, help="jobs ended before it stops")
    parser.add_argument("--workload-jobs", type=int, default=10_000, help="jobs generated")
    parser.add_argument("--cache-gb", type=float, default=5.0, help="benchmark's: 100")
    parser.add_argument("--every", type=int, default=50, help="jobs ended between samples")
    parser.add_argument("--containers", action="store_true", help="containers that grew")
    parser.add_argument("--tracemalloc", action="store_true", help="allocation sites that grew")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", action="store_true", help="one JSON line per sample")
    args = parser.parse_args()
    for name in ("nodes", "jobs", "every", "workload_jobs", "cache_gb"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be positive")
    if args.policy not in available():
        parser.error(f"--policy: unknown policy {args.policy}")

    config = replace(
        bench_config(args.policy, args.nodes, args.workload_jobs), cache_gb=args.cache_gb
    )
    records = config.records()
    jobs = jobs_from_records(records)
    sched = Scheduler(
        config.topology(),
        config.space(records),
        build_policy(config.policy, **config.policy_params),
        cost=config.cost_model,
        min_subjob_events=config.min_subjob_events,
        replicator=config.replicator(),
    )
    engine = SimEngine(sched)
    engine.begin(jobs, measure=config.measure(len(jobs)), max_backlog=config.max_backlog)
    if args.tracemalloc:
        tracemalloc.start(1)
    caches = engine.caches
    capacity = sum(c.capacity_events for c in caches if isinstance(c, RangeCache))
    cpu0 = time.process_time()
    base: tuple[float, int] | None = None
    last_containers: dict[str, int] = {}
    last_snap: tracemalloc.Snapshot | None = None
    target = args.every
    head = (
        f"{'jobs':>6}{'cpu s':>8}{'RSS MB':>9}{'fill %':>8}{'extents':>10}{'heap':>10}"
        f"{'segments':>10}{'ranges':>10}{'sets':>8}{'world seg':>10}{'B/extent':>9}{'blocks':>10}"
    )
    if not args.json:
        print(head, flush=True)
    while True:
        over = engine.proceed(math.inf, max_steps=100)
        ended = engine.jobs_ended
        if ended < target and not over:
            continue
        target = ended + args.every
        ranged = [c for c in caches if isinstance(c, RangeCache)]
        extents = sum(len(c._starts) for c in ranged)
        heap = sum(len(c._heap) for c in ranged)
        used = sum(c.used_events for c in ranged)
        rss = rss_mb()
        if base is None:
            base = (rss, extents)
        grown = (rss - base[0]) * 2**20 / max(extents - base[1], 1)
        row: dict[str, Any] = {
            "jobs": ended,
            "cpu_s": round(time.process_time() - cpu0, 1),
            "rss_mb": round(rss, 1),
            "fill": used / capacity if capacity else math.nan,
            "extents": extents,
            "heap": heap,
            "scheduler_directory": directory_counts(sched.directory),
            "world_directory": directory_counts(engine._world),
            "bytes_per_extent_since_first": round(grown),
            "jobs_in_system": len(sched.jobs),
            "blocks": sys.getallocatedblocks(),
        }
        if args.tracemalloc:
            row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            d = row["scheduler_directory"]
            w = row["world_directory"]
            print(
                f"{ended:>6}{row['cpu_s']:>8}{rss:>9.1f}{100 * row['fill']:>8.1f}{extents:>10}"
                f"{heap:>10}{d['segments']:>10}{d['node_ranges']:>10}{d['sets']:>8}"
                f"{w.get('segments', 0):>10}{grown:>9.0f}{row['blocks']:>10}"
                + (f"  traced {row['traced_mb']} MB" if args.tracemalloc else ""),
                flush=True,
            )
        if args.containers:
            now = containers(
                {"engine": engine, "scheduler": sched, "policy": sched.policy, "rec": engine.rec}
            )
            grew = {
                k: (last_containers.get(k, 0), v)
                for k, v in now.items()
                if v > last_containers.get(k, 0) and last_containers
            }
            for k, (a, b) in sorted(grew.items(), key=lambda kv: kv[1][0] - kv[1][1])[: args.top]:
                print(f"    grew {k}: {a} -> {b}", flush=True)
            last_containers = now
        if args.tracemalloc:
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)]
            )
            if last_snap is not None:
                for stat in snap.compare_to(last_snap, "lineno")[: args.top]:
                    frame = stat.traceback[0]
                    print(
                        f"    {stat.size_diff / 2**20:+8.2f} MB {stat.count_diff:+9d} blocks"
                        f"  {stat.size / 2**20:8.2f} MB  {frame.filename}:{frame.lineno}",
                        flush=True,
                    )
            last_snap = snap
        if over or ended >= args.jobs:
            if args.tracemalloc and last_snap is not None:
                total = sum(s.size for s in last_snap.statistics("filename"))
                print(f"  traced now: {total / 2**20:.1f} MB; the largest sites:", flush=True)
                for stat in last_snap.statistics("lineno")[: args.top]:
                    frame = stat.traceback[0]
                    print(
                        f"    {stat.size / 2**20:8.2f} MB {stat.count:9d} blocks"
                        f" {stat.size / max(extents, 1):7.1f} B/extent  "
                        f"{frame.filename}:{frame.lineno}",
                        flush=True,
                    )
            break


if __name__ == "__main__":
    main()
