"""Instructions a simulation executes, counted by valgrind's cachegrind (host-independent).

Wall-clock seconds on a shared machine drift by 20 % from minute to minute; instruction counts
do not, so changes to the simulator's hot path are judged by them (and by alternating timed
runs). The count of the same script stopping after its imports is subtracted. Runs are made
repeatable: a fixed hash seed, and one BLAS thread (numpy's idle BLAS threads otherwise make
counts differ by several percent between identical runs).

    python benchmarks/instructions.py [--policy out-of-order] [--jobs 1500] [--nodes 10] [--net]

A run also does work once, whatever its length: it loads the registry's policy modules
(compiling the sources of those not compiled where no bytecode is kept), builds the cluster,
and summarises with numpy: about 330 M instructions at 10 nodes, a fifth of a 300-job count.
``--net`` counts a one-job run too and prints the jobs after the first apart, the figure that
a change to the event loop moves.

Needs ``valgrind`` (Debian: ``apt-get install valgrind``); a 1,500-job run takes about
two minutes under it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from datasched.policies.registry import available

# The simulation of benchmarks/run.py (its bench_config), imported from beside this file.
SCRIPT = """
import sys
sys.path.insert(0, sys.argv[4])
from run import bench_config
from datasched.sim.experiment import simulate
policy, jobs, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if jobs:
    simulate(bench_config(policy, nodes, jobs))
"""


def count(policy: str, jobs: int, nodes: int) -> int:
    """Instructions of one run of SCRIPT (``jobs`` 0: imports only)."""
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-c",
        SCRIPT,
        policy,
        str(jobs),
        str(nodes),
        str(Path(__file__).resolve().parent),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    match = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="out-of-order")
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument(
        "--net",
        action="store_true",
        help="count a one-job run too and print the jobs after the first apart",
    )
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs: must be positive, got {args.jobs}")
    if args.nodes < 1:
        parser.error(f"--nodes: must be positive, got {args.nodes}")
    if args.policy not in available():
        parser.error(f"--policy: unknown policy {args.policy!r}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    base = count(args.policy, 0, args.nodes)
    total = count(args.policy, args.jobs, args.nodes)
    millions = (total - base) / 1e6
    print(
        f"{args.policy}, {args.jobs} jobs, {args.nodes} nodes: {millions:,.0f} M instructions "
        f"({millions / args.jobs:.2f} M per job; imports, {base / 1e6:,.0f} M, not counted)"
    )
    if args.net and args.jobs > 1:
        first = (count(args.policy, 1, args.nodes) - base) / 1e6
        rest = millions - first
        print(
            f"net of a one-job run ({first:,.0f} M): {rest:,.0f} M for the other "
            f"{args.jobs - 1} jobs, {rest / (args.jobs - 1):.2f} M per job"
        )


if __name__ == "__main__":
    main()
