"""Cost per scheduler event at a small and a large cluster, for every registered policy.

The simulator's cost per event should not grow with the cluster (docs/performance.md, "Cost
per event as the cluster grows"). For each policy this runs ``benchmarks/run.py``'s
simulation (load and data space growing with the cluster) at ``--small`` and ``--large``
nodes, each in a fresh process, and prints the seconds per scheduler event at both sizes, their
ratio (target: at most 1.5), the large run's seconds (``--clock``: wall-clock, or CPU time,
steadier on a busy host), its scheduler events and its peak memory (MB).

With ``--baseline SRC`` (a ``src`` directory of another build, e.g. the main branch's; or
``pure``: this build's own sources, ``DATASCHED_PURE=1``, against its compiled hot path) every
run is made with that build too, alternating with this one in the same rounds, and the table gives
each time beside the baseline's, their ratio and whether the two builds' summaries are
identical: the machine is shared and its speed drifts, so only figures paired in one run
compare.

    python benchmarks/scale_events.py [--policies a,b] [--small 10] [--large 1000]
        [--jobs-small 200] [--jobs-large 200] [--repeat 1] [--baseline ../main/src | pure]
        [--clock wall|cpu] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

# One run in a child process: the build under test is whichever ``src`` PYTHONPATH names.
CHILD = """
import dataclasses, hashlib, json, resource, sys, time
sys.path.insert(0, sys.argv[4])
from run import bench_config
from datasched import _compiled
from datasched.sim.experiment import simulate
policy, nodes, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cpu0 = time.process_time()
summary, result = simulate(bench_config(policy, nodes, jobs))
cpu = time.process_time() - cpu0
print(json.dumps({
    "wall_s": summary.wall_s,
    "cpu_s": cpu,
    "events": result.n_events_handled,
    "fingerprint": hashlib.sha256(json.dumps(
        {k: v for k, v in dataclasses.asdict(summary).items() if k != "wall_s"},
        sort_keys=True, default=str).encode()).hexdigest()[:16],
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "compiled": _compiled.build_is_current(),
}))
"""


def run_one(
    src: Path, policy: str, nodes: int, jobs: int, *, pure: bool = False
) -> dict[str, float | str]:
    """One simulation in a fresh process with ``src`` first on the path (``pure``: from its
    sources, its compiled hot path left aside)."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    env.pop("DATASCHED_PURE", None)
    if pure:
        env["DATASCHED_PURE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, policy, str(nodes), str(jobs), str(HERE)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{policy} at {nodes} nodes failed:\n{out.stderr[-2000:]}")
    result: dict[str, float | str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main() -> None:
    sys.path.insert(0, str(SRC))
    from datasched.policies.registry import available

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=",".join(available()), help="comma-separated")
    parser.add_argument("--small", type=int, default=10, help="nodes of the small cluster")
    parser.add_argument("--large", type=int, default=1000, help="nodes of the large cluster")
    parser.add_argument("--jobs-small", type=int, default=200)
    parser.add_argument("--jobs-large", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (median)")
    parser.add_argument(
        "--baseline", help="another build's src directory, or 'pure': this one's sources"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="the time per event: wall-clock, or the process's CPU time (steadier on a busy host)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    clock = "cpu_s" if args.clock == "cpu" else "wall_s"
    policies = _csv(args.policies)
    unknown = sorted(set(policies) - set(available()))
    if unknown:
        parser.error(f"--policies: unknown policy {', '.join(unknown)}")
    if args.repeat < 1 or min(args.small, args.large, args.jobs_small, args.jobs_large) < 1:
        parser.error("--repeat, --small, --large, --jobs-small, --jobs-large: must be positive")
    builds: dict[str, tuple[Path, bool]] = {"this": (SRC, False)}
    if args.baseline == "pure":
        builds["baseline"] = (SRC, True)
    elif args.baseline is not None:
        if not (Path(args.baseline) / "datasched").is_dir():
            parser.error(f"--baseline: {args.baseline} has no datasched package")
        builds["baseline"] = (Path(args.baseline), False)
    sizes = ((args.small, args.jobs_small), (args.large, args.jobs_large))
    samples: dict[tuple[str, str, int], list[dict[str, float | str]]] = {}
    for _ in range(args.repeat):
        for policy in policies:
            for nodes, jobs in sizes:
                for build, (src, pure) in builds.items():
                    r = run_one(src, policy, nodes, jobs, pure=pure)
                    samples.setdefault((build, policy, nodes), []).append(r)
                    print(
                        f"  {build:<9}{policy:<20}{nodes:>6} nodes {r['wall_s']:8.2f} s wall"
                        f" {r['cpu_s']:8.2f} s CPU {r['fingerprint']}"
                        f"{' compiled' if r['compiled'] else ''}",
                        file=sys.stderr,
                        flush=True,
                    )
    rows = []
    for policy in policies:
        row: dict[str, object] = {"policy": policy}
        for build in builds:
            per_event = {}
            for nodes, _jobs in sizes:
                runs = samples[(build, policy, nodes)]
                wall = statistics.median(float(r[clock]) for r in runs)
                events = int(runs[0]["events"])
                per_event[nodes] = wall / max(events, 1)
                prefix = f"{build}_{nodes}"
                row[f"{prefix}_wall_s"] = round(wall, 3)
                row[f"{prefix}_events"] = events
                row[f"{prefix}_us_per_event"] = round(per_event[nodes] * 1e6, 1)
                row[f"{prefix}_peak_rss_mb"] = round(max(float(r["peak_rss_mb"]) for r in runs))
                row[f"{prefix}_fingerprint"] = runs[0]["fingerprint"]
            row[f"{build}_ratio"] = round(per_event[args.large] / per_event[args.small], 2)
        rows.append(row)
    if args.json:
        print(json.dumps({"small": args.small, "large": args.large, "runs": rows}))
        return
    s, g = args.small, args.large
    head = f"{'policy':<20}{'us/ev ' + str(s):>11}{'us/ev ' + str(g):>12}{'ratio':>7}"
    head += f"{'s ' + str(g):>10}{'MB':>6}"
    if args.baseline:
        head += f"{'base us/ev ' + str(g):>17}{'base ratio':>11}{'base s':>10}{'speed-up':>9}"
        head += "  same results"
    print(head)
    for r in rows:
        line = (
            f"{r['policy']:<20}{r[f'this_{s}_us_per_event']:>11}{r[f'this_{g}_us_per_event']:>12}"
            f"{r['this_ratio']:>7}{r[f'this_{g}_wall_s']:>10}{r[f'this_{g}_peak_rss_mb']:>6}"
        )
        if args.baseline:
            same = all(
                r[f"this_{n}_{k}"] == r[f"baseline_{n}_{k}"]
                for n in (s, g)
                for k in ("events", "fingerprint")
            )
            speed = float(str(r[f"baseline_{g}_wall_s"])) / float(str(r[f"this_{g}_wall_s"]))
            line += (
                f"{r[f'baseline_{g}_us_per_event']:>17}{r['baseline_ratio']:>11}"
                f"{r[f'baseline_{g}_wall_s']:>10}{speed:>8.2f}x  {'yes' if same else 'NO'}"
            )
        print(line)


if __name__ == "__main__":
    main()
