"""What confining users' code costs: the same packets run in this process (as ``datasched
run`` runs the user's own processor on a worker) and in a sandboxed child (as the service runs
its users' processors), in one run, interleaved, with their ratio.

Prints, per packet size: the median wall time of a packet in this process and in the
sandbox (the child kept between packets, as a worker keeps it for a job), their ratio, and
what starting a child costs (bubblewrap, Python, the processor's imports), which a job pays
once per worker it runs on. Needs bubblewrap; as root, the child runs as ``--run-as``
(default ``nobody``).

    python benchmarks/sandbox.py [--events 500,5000,50000] [--repeat 15] [--run-as nobody] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from datasched.runtime.compute import run_processor
from datasched.runtime.demodata import DimuonMass, write_demo_dataset
from datasched.runtime.events import ReadSpec
from datasched.sandbox.confine import Confinement, UserCode, sandbox_problem
from datasched.sandbox.host import Child

TREE = "Events"


def measure(events: list[int], repeat: int, run_as: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="datasched-bench-") as tmp:
        data = Path(tmp) / "data"
        data.parent.chmod(0o755)
        write_demo_dataset(data, n_events=max(events) * 2, n_files=1, seed=1)
        path = str(next(data.glob("*.root")))
        conf = Confinement(run_as=run_as if os.geteuid() == 0 else None)
        code = UserCode("datasched.runtime.demodata:DimuonMass")
        starts = []
        for _ in range(3):
            t0 = time.perf_counter()
            child = Child(conf, code)
            child.start()
            child.packet(path, url=path, tree=TREE, start=0, stop=10, read={}, timeout_s=300)
            starts.append(time.perf_counter() - t0)
            child.close()
        child = Child(conf, code)
        child.start()
        proc = DimuonMass()
        rows = []
        try:
            for n in events:
                here: list[float] = []
                boxed: list[float] = []
                for i in range(repeat):  # interleaved: the machine's load hits both alike
                    a = (i % 2) * n
                    t0 = time.perf_counter()
                    run_processor(proc, "DimuonMass", path, path, TREE, ReadSpec(), a, a + n)
                    here.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    child.packet(
                        path, url=path, tree=TREE, start=a, stop=a + n, read={}, timeout_s=300
                    )
                    boxed.append(time.perf_counter() - t0)
                h, b = statistics.median(here), statistics.median(boxed)
                rows.append({"events": n, "here_s": h, "sandbox_s": b, "ratio": b / h})
        finally:
            child.close()
    return {"child_start_s": statistics.median(starts), "packets": rows, "run_as": conf.run_as}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="500,5000,50000", help="Packet sizes, in events.")
    parser.add_argument("--repeat", type=int, default=15, help="Packets of each size.")
    parser.add_argument("--run-as", default="nobody", help="The jobs' account, as root.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    problem = sandbox_problem()
    if problem is not None:
        raise SystemExit(f"sandbox.py: {problem}")
    sizes = [int(x) for x in args.events.split(",")]
    result = measure(sizes, args.repeat, args.run_as)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"a child's start (bubblewrap, Python, the processor's imports): "
          f"{result['child_start_s']:.2f} s, once per job and worker")  # fmt: skip
    print(f"{'events':>8} {'here':>9} {'sandbox':>9} {'ratio':>6}")
    for r in result["packets"]:
        print(f"{r['events']:>8} {r['here_s']:>8.4f}s {r['sandbox_s']:>8.4f}s {r['ratio']:>6.2f}")


if __name__ == "__main__":
    main()
