"""Runtime benchmark: the demo workload on four Dask workers with throttled tertiary storage.

Prints, for the processing farm, a cache-aware policy and a plain Dask map of the same
packets (all with cold caches), the measured makespan beside the run's physical floor (its
distinct bytes over the aggregate tertiary bandwidth, and its CPU time over this machine's
cores), the simulator's prediction, and the ratios the targets are stated in. With
``--repeat N`` it ends with the median and the worst of each ratio over the N runs:

* the cache-aware policy finishes at least 2x sooner than the processing farm and at least
  1.5x sooner than the plain Dask map in the median, and 1.3x sooner than the map at worst;
* the simulator's prediction is within 25 % of the measured makespan in the median;
* the master's own scheduling time per packet is under 2 ms.

    python benchmarks/runtime.py [--policy out-of-order] [--tertiary-mb-s 0.25] [--repeat N]
        [--json]

The demo runs out-of-order with peer reads (its replication option, ponce-hersch §4.2).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from datasched.compare.demo import run_demo
from datasched.runtime.reports import RunReport
from datasched.runtime.timeline import lanes
from datasched.sim.parallel import usable_cores


def breakdown(report: RunReport) -> dict[str, Any]:
    """Where a run's worker time went, from its packets' timelines (seconds, summed over
    the workers' rows): reading and computing; the return (the packet's end on its worker
    to its result at the master); the gap from a result at the master to the next packet's
    start on the same row (the master's round trip); idle before a row's first packet and
    after its last; and the master's own scheduling time."""
    p = report.packets
    busy = sum(x.read_s + x.compute_s for x in p)
    ret = sum(max(x.t_end - (x.t_start + x.read_s + x.compute_s), 0.0) for x in p)
    gaps: list[float] = []
    head = tail = 0.0
    rows = 0
    for worker_rows in lanes(report).values():
        for row in worker_rows:
            rows += 1
            head += row[0].t_start
            tail += max(report.makespan_s - row[-1].t_end, 0.0)
            gaps += [max(b.t_start - a.t_end, 0.0) for a, b in itertools.pairwise(row)]
    return {
        "packets": len(p),
        "rows": rows,
        "read_s": round(sum(x.read_s for x in p), 2),
        "compute_s": round(sum(x.compute_s for x in p), 2),
        "cpu_s": round(sum(x.cpu_s for x in p), 2),
        "busy_s": round(busy, 2),
        "return_s": round(ret, 2),
        "gap_s": round(sum(gaps), 2),
        "gap_median_ms": round(1e3 * statistics.median(gaps), 1) if gaps else 0.0,
        "head_s": round(head, 2),
        "tail_s": round(tail, 2),
        "master_s": round(report.scheduling_s, 2),
        "mean_packet_busy_ms": round(1e3 * busy / max(len(p), 1), 1),
    }


class ProcessCPU:
    """The CPU time of this process and all its descendants (the master with its in-process
    Dask scheduler, the nannies, the workers), sampled every ``every_s`` in a thread, so a
    run's window can be charged with all the CPU it used: the packets' threads and what
    they do not see (Dask's event loops and comms, the master)."""

    def __init__(self, every_s: float = 0.1) -> None:
        self.every_s = every_s
        self.series: dict[int, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ProcessCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            for p in [me, *me.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                except psutil.Error:
                    continue  # gone meanwhile
                self.series.setdefault(p.pid, []).append((time.time(), t.user + t.system))
            self._stop.wait(self.every_s)

    def window(self, a: float, b: float) -> float:
        """CPU seconds all the processes used between wall-clock times ``a`` and ``b``
        (each process's last sample at or before each time; its first one before it)."""

        def at(series: list[tuple[float, float]], t: float) -> float:
            value = series[0][1]
            for when, cpu in series:
                if when > t:
                    break
                value = cpu
            return value

        return sum(at(s, b) - at(s, a) for s in self.series.values())


def run_cpu(report: RunReport, cpu: ProcessCPU, cores: int) -> dict[str, float]:
    """A run's CPU over its makespan: all processes', its packets' threads', and the share
    of the machine's cores that all processes kept busy."""
    total = cpu.window(report.started_wall, report.started_wall + report.makespan_s)
    return {
        "all_processes": round(total, 2),
        "packet_threads": round(sum(p.cpu_s for p in report.packets), 2),
        "share_of_cores": round(total / max(report.makespan_s * cores, 1e-9), 2),
    }


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="datasched-bench-") as tmp,
        ProcessCPU() as cpu,
    ):
        result = run_demo(
            args.data,
            Path(tmp),
            cache_policy=args.policy,
            workers=args.workers,
            tertiary_bytes_per_s=args.tertiary_mb_s * 1e6,
        )
    cache = result.runs[args.policy]
    farm = result.runs["farm"]
    runs = {**result.runs, "dask_map": result.baseline}
    floors = {**result.floors, "dask_map": result.floors["dask map"]}
    del floors["dask map"]
    return {
        "policy_params": result.params.get(args.policy, {}),
        "makespan_s": {name: round(r.makespan_s, 2) for name, r in runs.items()},
        "floor_s": {
            name: {"tertiary": round(f.tertiary_s, 2), "cpu": round(f.cpu_s, 2)}
            for name, f in floors.items()
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
        "cache_hit_ratio": {name: round(r.cache_hit_ratio, 3) for name, r in runs.items()},
        "tertiary_mb": {name: round(r.bytes_from_tertiary / 1e6, 2) for name, r in runs.items()},
        "packets": {name: len(r.packets) for name, r in runs.items()},
        "breakdown": {name: breakdown(r) for name, r in runs.items()},
        "run_cpu_s": {name: run_cpu(r, cpu, usable_cores()) for name, r in runs.items()},
        "notes": result.notes,
    }


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst of each ratio over the runs, and the median prediction errors."""
    out: dict[str, Any] = {"n_runs": len(results)}
    for key in ("speedup_over_farm", "speedup_over_dask_map"):
        values = sorted(r[key] for r in results)
        out[key] = {"median": statistics.median(values), "worst": values[0], "all": values}
    errors: dict[str, list[float]] = {}
    for r in results:
        for name, e in r["prediction_error"].items():
            errors.setdefault(name, []).append(e)
    out["prediction_error_median"] = {n: statistics.median(e) for n, e in errors.items()}
    out["prediction_error_abs_median"] = {
        n: statistics.median(abs(x) for x in e) for n, e in errors.items()
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="out-of-order")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tertiary-mb-s", type=float, default=0.25)
    parser.add_argument("--data", type=Path, default=Path("out/demo-data"))
    parser.add_argument(
        "--repeat", type=int, default=1, help="independent runs (the machine is noisy)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = []
    for i in range(args.repeat):
        figures = one_run(args)
        results.append(figures)
        if not args.json:
            print(f"-- run {i + 1} of {args.repeat}")
            for key, value in figures.items():
                print(f"{key:24s} {value}")
    if args.json:
        doc: Any = results[0] if args.repeat == 1 else {"runs": results, **summary(results)}
        print(json.dumps(doc))
    elif args.repeat > 1:
        print("-- over all runs")
        for key, value in summary(results).items():
            print(f"{key:28s} {value}")


if __name__ == "__main__":
    main()
