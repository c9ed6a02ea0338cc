"""The simulator's uneven-data job (docs/proof.md) with disks whose total rate falls with
their readers (``CostModel.disk_contention``): adaptive / basic time by the coefficient, for
the reproduction's setup (16 workers, 18 file servers, 300 files; the mean over its eight
placements) and for the test hosts' setup (4 workers, 2 file servers behind 0.8 Mbit/s links,
24 files of 45 KB, 1 ms of CPU an event; its one placement). Prints JSON.

    PYTHONPATH=src python benchmarks/proof_contention.py [--coefficients 0,0.25,0.5,1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from typing import Any

from datasched.studies.proof.runs import ADAPTIVE, BASIC, run_uneven
from datasched.studies.proof.setup import UnevenSetup

HOSTS = UnevenSetup(
    workers=4,
    servers=2,
    files=24,
    file_events=1000,
    event_bytes=45.0,
    cpu_s_per_event=1e-3,
    disk_bytes_per_s=0.8e6 / 8,
    network_bytes_per_s=1e9,
)
"""The test hosts' experiment (benchmarks/proof_hosts.py) as the simulator sees it: a file
server's link is its disk; placement 3 is the hosts' (the same draw)."""
HOSTS_SEED = 3


def ratios(
    setup: UnevenSetup, seeds: range | list[int], adaptive_params: dict[str, Any]
) -> list[float]:
    out = []
    for seed in seeds:
        basic = run_uneven(setup, BASIC, seed)
        adaptive = run_uneven(setup, ADAPTIVE, seed, adaptive_params)
        out.append(adaptive.end_s / basic.end_s)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coefficients", default="0,0.1,0.25,0.5,1,2")
    parser.add_argument("--quick", action="store_true", help="150 files, four placements")
    parser.add_argument(
        "--adaptive-limit",
        type=int,
        default=None,
        help="the adaptive packetizer's max_workers_per_node (default: none, as ROOT's newest)",
    )
    args = parser.parse_args(argv)
    try:
        coefficients = [float(c) for c in args.coefficients.split(",")]
    except ValueError:
        parser.error(f"--coefficients: numbers separated by commas, got {args.coefficients!r}")
    params: dict[str, Any] = {}
    if args.adaptive_limit is not None:
        params["max_workers_per_node"] = args.adaptive_limit
    paper = UnevenSetup(files=150 if args.quick else 300)
    seeds = range(4 if args.quick else 8)
    rows = []
    for c in coefficients:
        r = ratios(replace(paper, disk_contention=c), seeds, params)
        h = ratios(replace(HOSTS, disk_contention=c), [HOSTS_SEED], params)[0]
        rows.append(
            {
                "contention": c,
                "reproduction_mean": round(statistics.fmean(r), 3),
                "reproduction_range": [round(min(r), 3), round(max(r), 3)],
                "hosts_setup": round(h, 3),
            }
        )
        sys.stderr.write(f"c={c:g}: {rows[-1]}\n")
    json.dump(rows, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
