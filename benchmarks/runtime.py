"""Runtime benchmark: the demo workload on four Dask workers with throttled tertiary storage.

Prints, for the processing farm, a cache-aware policy and a plain Dask map of the same
packets (all with cold caches), the measured makespan, the simulator's prediction, and the
ratios the targets are stated in:

* the cache-aware policy finishes at least 2x sooner than the processing farm and at least
  1.5x sooner than the plain Dask map;
* the simulator's prediction is within 25 % of the measured makespan;
* the master's own scheduling time per packet is under 2 ms.

    python benchmarks/runtime.py [--policy out-of-order] [--tertiary-mb-s 0.25] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from datasched.runtime.demo import run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="out-of-order")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tertiary-mb-s", type=float, default=0.25)
    parser.add_argument("--data", type=Path, default=Path("out/demo-data"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="datasched-bench-") as tmp:
        result = run_demo(
            args.data,
            Path(tmp),
            cache_policy=args.policy,
            workers=args.workers,
            tertiary_bytes_per_s=args.tertiary_mb_s * 1e6,
        )
    cache = result.runs[args.policy]
    farm = result.runs["farm"]
    figures = {
        "makespan_s": {
            "farm": round(farm.makespan_s, 2),
            args.policy: round(cache.makespan_s, 2),
            "dask_map": round(result.baseline.makespan_s, 2),
        },
        "sim_prediction_s": {k: round(v, 2) for k, v in result.predictions.items()},
        "speedup_over_farm": round(farm.makespan_s / cache.makespan_s, 2),
        "speedup_over_dask_map": round(result.baseline.makespan_s / cache.makespan_s, 2),
        "prediction_error": {
            name: round(result.predictions[name] / r.makespan_s - 1, 3)
            for name, r in result.runs.items()
        },
        "master_ms_per_packet": {
            name: round(r.scheduling_ms_per_packet, 3) for name, r in result.runs.items()
        },
        "cache_hit_ratio": {
            name: round(r.cache_hit_ratio, 3)
            for name, r in [*result.runs.items(), ("dask_map", result.baseline)]
        },
    }
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:24s} {value}")


if __name__ == "__main__":
    main()
