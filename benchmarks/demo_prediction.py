"""The demo's prediction against its real run, quickly: only the cache-aware policy.

``datasched demo`` runs the farm, the cache-aware policy and a plain Dask map; this runs
the calibration and the cache-aware policy alone (the same jobs, cluster, throttle and
packets as the demo), then the simulator's prediction of that run, and prints the
prediction's error (predicted minus actual, over actual) twice: with the share of a core
each node had before the machine's load was measured (the workers alone on its cores), and
with the share measured (:mod:`datasched.runtime.coreshare`), with that share and the
calibration's whole per-packet cost charged on the slots in parallel
(``CostModel.packet_overhead_s``, the demo's prediction before the master's queue), and with
the master's part of it served one packet at a time in a queue of one
(``CostModel.master_s_per_packet``), as ``datasched demo`` now does: the same run, four
predictions. With ``--busy N`` it keeps N other processes busy
on the machine (``while True: pass``) for the whole trial, to see what another program
beside the run does to the prediction.

After the fact, it also predicts the run with the other programs' runnable threads
sampled during it (every 0.1 s, ``procs_running`` less the run's own processes' runnable
threads) instead of in the window before it: what the model gives when the load it is
told is the load the run had.

    python benchmarks/demo_prediction.py [--repeat 3] [--busy 1] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from datasched.compare.demo import (
    CACHE_FRACTION,
    DEMO_EVENTS,
    DEMO_FILES,
    DEMO_POLICY_PARAMS,
    _calibrate,
    _with_outputs,
    demo_workload,
    shared_cores,
)
from datasched.compare.predict import run_makespan, simulate_run
from datasched.core.packets import PacketSizing
from datasched.runtime.coreshare import measure_machine_load, runnable_threads
from datasched.runtime.jobspec import load_jobs
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import Calibration, ClusterOptions, job_space, run_jobs
from datasched.service.eta import eta_error
from datasched.sim.engine import SimRun
from datasched.sim.parallel import usable_cores


def _own_runnable() -> int:
    """Runnable threads of this process and its children (the run's workers)."""
    import psutil

    pids = [os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))]
    n = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                state = (task / "stat").read_text("ascii").rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            n += state == "R"
    return n


class OthersDuringRun(threading.Thread):
    """Samples other programs' runnable threads while the run goes on (the sampler itself
    is counted in both the machine's and the run's own: it cancels out)."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.period_s = period_s
        self.samples: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.period_s):
            total = runnable_threads()
            if total is None:
                return
            self.samples.append(max(total - _own_runnable(), 0))

    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else 0.0


def trial(data_dir: Path, policy: str, workers: int, tertiary_mb_s: float) -> dict[str, Any]:
    from datasched.runtime.demodata import demo_dataset_is_current, write_demo_dataset

    load_before = os.getloadavg()[0]
    catalog = data_dir / "catalog.yaml"
    if not catalog.exists() or not demo_dataset_is_current(catalog):
        catalog = write_demo_dataset(data_dir, n_events=DEMO_EVENTS, n_files=DEMO_FILES)
    with tempfile.TemporaryDirectory(prefix="datasched-pred-") as tmp:
        out = Path(tmp)
        specs = load_jobs(demo_workload(catalog, out))
        space = job_space(specs)
        opts = ClusterOptions(
            workers=workers,
            cache_bytes=int(CACHE_FRACTION * space.n_bytes * 1.05),
            cache_root=out / "caches",
            tertiary_bytes_per_s=tertiary_mb_s * 1e6,
        )
        params = DEMO_POLICY_PARAMS.get(policy, {})
        cores = usable_cores()
        calibrated = asyncio.run(_calibrate(specs, opts))
        load = measure_machine_load(cores)  # as the demo does, just before the run
        calibration = shared_cores(calibrated, workers, cores, load.others)
        packets = PacketSizing(target_s=0.5, min_events=500)  # the demo's
        config = EngineConfig(queue_s=0.5)
        during = OthersDuringRun()
        during.start()
        report = asyncio.run(
            run_jobs(
                _with_outputs(specs, out / policy),
                opts,
                policy=policy,
                policy_params=params,
                config=config,
                packets=packets,
                cold=True,
                calibration=calibration,
            )
        )
        during.done.set()
        during.join()
        assert isinstance(report.calibration, Calibration)

        def simulated(others: float, per_packet: str = "queue") -> SimRun:
            cal = report.calibration
            cost = cal.cost
            if per_packet == "none":
                cost = replace(cost, packet_overhead_s=0.0, master_s_per_packet=0.0)
            elif per_packet == "parallel":
                cost = replace(
                    cost,
                    packet_overhead_s=cost.packet_overhead_s + cost.master_s_per_packet,
                    master_s_per_packet=0.0,
                )
            scaled = shared_cores(replace(cal, cost=cost), workers, cores, others)
            _, run = simulate_run(
                specs,
                opts,
                scaled,
                policy=policy,
                policy_params=params,
                packets=packets,
                config=config,
            )
            return run

        def predicted(others: float, per_packet: str = "queue") -> float:
            return run_makespan(simulated(others, per_packet))

        # The share the demo gave each node before it measured the machine (its workers
        # alone on the cores), the measured one without the per-packet cost, with it all
        # charged on the slots (the demo's prediction before the master's queue), and with
        # the master's part queued (now).
        alone = predicted(0.0, per_packet="none")
        measured = predicted(load.others, per_packet="none")
        with_packets = predicted(load.others, per_packet="parallel")
        sim = simulated(load.others)
        queued = run_makespan(sim)
        after = predicted(during.mean())
    real = report.makespan_s
    return {
        "real_s": round(real, 2),
        "others_runnable": round(load.others, 2),
        "share": round(load.share(workers), 3),
        "packet_overhead_ms": round(report.calibration.cost.packet_overhead_s * 1e3, 2),
        "master_ms_per_packet": round(report.calibration.cost.master_s_per_packet * 1e3, 2),
        "packets": len(report.packets),
        "predicted_packets": sim.master_packets,
        "predicted_cores_alone_s": round(alone, 2),
        "predicted_measured_share_s": round(measured, 2),
        "predicted_with_packet_cost_s": round(with_packets, 2),
        "predicted_master_queue_s": round(queued, 2),
        "error_cores_alone": round(eta_error(alone, real) / real, 3),
        "error_measured_share": round(eta_error(measured, real) / real, 3),
        "error_with_packet_cost": round(eta_error(with_packets, real) / real, 3),
        "error_master_queue": round(eta_error(queued, real) / real, 3),
        "others_during_run": round(during.mean(), 2),
        "predicted_master_queue_during_s": round(after, 2),
        "error_master_queue_during": round(eta_error(after, real) / real, 3),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="out-of-order")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--tertiary-mb-s", type=float, default=0.25)
    p.add_argument("--data", type=Path, default=Path("out/demo-data"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--busy", type=int, default=0, help="other busy processes beside the run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        results = []
        for _ in range(args.repeat):
            results.append(trial(args.data, args.policy, args.workers, args.tertiary_mb_s))
            if not args.json:
                print(results[-1], flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    summary: dict[str, Any] = {"busy": args.busy, "runs": results}
    keys = ("error_cores_alone", "error_measured_share", "error_with_packet_cost")
    for key in (*keys, "error_master_queue", "error_master_queue_during"):
        errors = [r[key] for r in results]
        summary[f"median_{key}"] = statistics.median(errors)
        summary[f"median_abs_{key}"] = statistics.median(abs(e) for e in errors)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"busy {args.busy}: median error, cores alone "
            f"{summary['median_error_cores_alone']:+.1%}, measured share "
            f"{summary['median_error_measured_share']:+.1%}, with the per-packet cost "
            f"{summary['median_error_with_packet_cost']:+.1%}, with the master's queue "
            f"{summary['median_error_master_queue']:+.1%} (with the load during the run, "
            f"after the fact: {summary['median_error_master_queue_during']:+.1%})"
        )


if __name__ == "__main__":
    main()
