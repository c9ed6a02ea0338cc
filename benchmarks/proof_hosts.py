"""PROOF's uneven-data experiment on the test hosts (docs/proof.md, "The uneven job on the test
hosts"): file servers on storage hosts of their own behind links of limited rate, the four
worker hosts processing, the basic and the adaptive packetizer on the same placement; prints
adaptive / basic time (the median of the repeats), each server's measured rate by its number
of readers and the contention coefficient that fits it, as JSON.

Needs root, iproute2 and xrootd (the test hosts, tests/hosts_support.py). Usage:

    PYTHONPATH=src python benchmarks/proof_hosts.py [--repeats 3] [--servers 2] [--mbit 0.8]
        [--slots 1] [--cpu-ms 1] [--file-events 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import dask.config

import hosts_support
from hosts.proof_runs import HostsUneven, proof_hosts, run_experiment


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("--servers", type=int, default=2, help="file-server hosts (default 2)")
    parser.add_argument(
        "--mbit", type=float, default=0.8, help="each server's link, Mbit/s (default 0.8)"
    )
    parser.add_argument("--cpu-ms", type=float, default=1.0, help="emulated CPU an event, ms")
    parser.add_argument(
        "--file-events", type=int, default=1000, help="events a file (default 1000: 45 KB)"
    )
    parser.add_argument("--slots", type=int, default=1, help="slots a worker host (default 1)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: must be at least 1, got {args.repeats}")
    if args.servers < 1:
        parser.error(f"--servers: must be at least 1, got {args.servers}")
    if args.file_events < 1:
        parser.error(f"--file-events: must be at least 1, got {args.file_events}")
    if not 1 <= args.slots <= 2:
        parser.error(f"--slots: 1 or 2 (a worker host's Dask threads), got {args.slots}")
    if not args.mbit > 0:
        parser.error(f"--mbit: must be positive, got {args.mbit}")
    problem = hosts_support.missing_tools()
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        return 2
    setup = HostsUneven(
        servers=args.servers,
        server_mbit=args.mbit,
        cpu_ms_per_event=args.cpu_ms,
        slots=args.slots,
        file_events=args.file_events,
    )
    config = {k: v for k, v in hosts_support.HOSTS_DASK_CONFIG.items() if "profile" not in k}
    with (
        dask.config.set(config),
        proof_hosts(setup.servers) as topo,
        tempfile.TemporaryDirectory(prefix="datasched-proof-hosts-") as tmp,
    ):
        exp = run_experiment(topo, setup, Path(tmp), repeats=args.repeats)
    json.dump(exp.summary(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
