"""Hot-file replication benchmark: the runtime demo's workload with and without
``--replicate-hot``, measured on Dask workers and predicted by the simulator.

For each policy, two runs on the same cluster with cold caches (replication off, then on at
``--threshold``), the simulator's prediction of each (the same scheduler, replicator
included, driven by the simulated engine), and the ratios on/off in the same invocation:

    python benchmarks/hot_replication.py [--policies farm,out-of-order] [--threshold 2]
        [--workers 4] [--tertiary-mb-s 0.25] [--data out/demo-data] [--own-defaults] [--json]

A ratio below 1 means replication made the run faster. Replication's own copies are not
packets, so their bytes are not in the packets' tertiary and peer figures; ``replications``
counts them (each is one file copied from a worker's cache to another's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from datasched.compare.demo import (
    CACHE_FRACTION,
    DEMO_EVENTS,
    DEMO_FILES,
    DEMO_POLICY_PARAMS,
    demo_workload,
    shared_cores,
)
from datasched.compare.predict import simulate_run
from datasched.core.packets import PacketSizing
from datasched.runtime.demodata import demo_dataset_is_current, write_demo_dataset
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig, RunReport
from datasched.runtime.session import (
    Calibration,
    ClusterOptions,
    build_scheduler,
    calibrate_on_cluster,
    job_space,
    open_cluster,
)
from datasched.runtime.worker import clear_cache
from datasched.sim.parallel import usable_cores

CONFIG = EngineConfig(queue_s=0.5)
PACKETS = PacketSizing(target_s=0.5, min_events=500)
"""The demo's engine settings (compare/demo.py)."""


async def measure(
    specs: list[JobSpec],
    opts: ClusterOptions,
    calibration: Calibration,
    policy: str,
    params: dict[str, Any],
) -> tuple[RunReport, int]:
    """One run with cold caches: its report and how many replications it made."""
    space = job_space(specs)
    async with open_cluster(opts) as (client, names):
        await client.run(clear_cache)
        sched = build_scheduler(
            len(names),
            opts,
            space,
            calibration,
            policy=policy,
            policy_params=params,
            packets=PACKETS,
        )
        engine = RuntimeEngine(client, sched, names, config=CONFIG)
        report = await engine.run(specs, known_cache={})
    copies = sched.replicator.replications if sched.replicator is not None else 0
    return report, copies


def predict(
    specs: list[JobSpec],
    opts: ClusterOptions,
    calibration: Calibration,
    policy: str,
    params: dict[str, Any],
) -> tuple[float, int, float]:
    """The simulator's makespan, replications and tertiary bytes for the same run."""
    sched, run = simulate_run(
        specs, opts, calibration, policy=policy, policy_params=params, packets=PACKETS
    )
    copies = sched.replicator.replications if sched.replicator is not None else 0
    makespan = max((r.end_s for r in run.jobs), default=0.0)
    return makespan, copies, run.tertiary_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="farm,out-of-order")
    parser.add_argument("--threshold", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tertiary-mb-s", type=float, default=0.25)
    parser.add_argument("--data", type=Path, default=Path("out/demo-data"))
    parser.add_argument(
        "--own-defaults",
        action="store_true",
        help="run each policy with its own defaults, not the demo's parameters (out-of-order "
        "then has no peer reads)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    catalog = args.data / "catalog.yaml"
    if not catalog.exists() or not demo_dataset_is_current(catalog):
        catalog = write_demo_dataset(args.data, n_events=DEMO_EVENTS, n_files=DEMO_FILES)
    results: dict[str, Any] = {"threshold": args.threshold, "policies": {}}
    with tempfile.TemporaryDirectory(prefix="datasched-hot-") as tmp:
        out = Path(tmp)
        specs = load_jobs(demo_workload(catalog, out))
        space = job_space(specs)
        opts = ClusterOptions(
            workers=args.workers,
            cache_bytes=int(CACHE_FRACTION * space.n_bytes * 1.05),
            cache_root=out / "caches",
            tertiary_bytes_per_s=args.tertiary_mb_s * 1e6,
        )
        calibration = asyncio.run(_calibrate(specs, opts))
        cores = usable_cores()
        sim_cal = shared_cores(calibration, args.workers, cores)
        for policy in args.policies.split(","):
            params = {} if args.own_defaults else DEMO_POLICY_PARAMS.get(policy, {})
            rows: dict[str, Any] = {}
            for label, hot in (("off", None), ("on", args.threshold)):
                o = replace(opts, replicate_hot=hot)
                report, copies = asyncio.run(measure(specs, o, calibration, policy, params))
                assert report.events_processed == report.events_expected
                predicted, sim_copies, sim_tertiary = predict(specs, o, sim_cal, policy, params)
                rows[label] = {
                    "makespan_s": round(report.makespan_s, 2),
                    "replications": copies,
                    "tertiary_mb": round(report.bytes_from_tertiary / 1e6, 2),
                    "peer_mb": round(sum(p.bytes_from_peer for p in report.packets) / 1e6, 2),
                    "cache_hit_ratio": round(report.cache_hit_ratio, 3),
                    "sim_makespan_s": round(predicted, 2),
                    "sim_replications": sim_copies,
                    "sim_tertiary_mb": round(sim_tertiary / 1e6, 2),
                }
            off, on = rows["off"], rows["on"]
            rows["ratio_on_over_off"] = {
                "measured": round(on["makespan_s"] / off["makespan_s"], 3),
                "simulated": round(on["sim_makespan_s"] / off["sim_makespan_s"], 3),
            }
            results["policies"][policy] = {"params": params, **rows}
            if not args.json:
                print(f"-- {policy} {params or ''}")
                for key, value in rows.items():
                    print(f"  {key:18s} {value}")
    if args.json:
        print(json.dumps(results))


async def _calibrate(specs: list[JobSpec], opts: ClusterOptions) -> Calibration:
    async with open_cluster(opts) as (client, _):
        return await calibrate_on_cluster(
            client, specs, job_space(specs), opts.tertiary_bytes_per_s
        )


if __name__ == "__main__":
    main()
