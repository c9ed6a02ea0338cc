"""The predictor against the real runtime, on the demo's workload (``datasched demo``).

1. A warm-up run (under ``out-of-order``: ``farm`` reads around the caches) of the first
   few jobs fills the workers' caches and gives
   each node its measured rates (from its packets, as the daemon measures them).
2. The snapshot: the caches' contents (asked of the workers), the measured rates, and every
   job of the workload queued at once (submission times 0).
3. The prediction (:func:`datasched.service.whatif.predict`) under each policy, then the
   real run of the same jobs under it, from the same warm caches (restored between runs).

Prints each job's predicted and actual finish and the errors (signed: predicted minus
actual; relative: over the actual finish). Takes minutes: not part of the test run.

    PYTHONPATH=src python benchmarks/whatif_validate.py --out /tmp/whatif-validate
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from datasched.compare.demo import CACHE_FRACTION, DEMO_POLICY_PARAMS, demo_workload
from datasched.core.packets import PacketSizing
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig, PacketStat
from datasched.runtime.session import ClusterOptions, job_space, open_cluster, run_jobs
from datasched.runtime.worker import cache_contents
from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    NodeRates,
    NodeSnapshot,
)
from datasched.service.eta import eta_error
from datasched.service.whatif import predict


def measured_rates(packets: list[PacketStat], in_flight: int) -> dict[str, NodeRates]:
    """Each node's rates from its packets: events per slot-second by where they were read
    from (a packet's wall time from its start on the worker to its result in the master,
    shared by the ``in_flight`` packets a slot keeps: the master's and Dask's overheads
    count), and bytes per second fetched from central storage."""
    events: dict[tuple[str, str], int] = defaultdict(int)
    busy: dict[tuple[str, str], float] = defaultdict(float)
    fetched: dict[str, int] = defaultdict(int)
    fetch_s: dict[str, float] = defaultdict(float)
    for p in packets:
        kind = {"staged": "cache", "direct": "tertiary"}.get(p.source, p.source)
        events[p.node, kind] += p.n_events
        wall = p.t_end - p.t_start - (p.read_s if kind == "tertiary" else 0.0)
        busy[p.node, kind] += max(wall, 0.0) / in_flight
        if p.bytes_from_tertiary and p.read_s > 0:
            fetched[p.node] += p.bytes_from_tertiary
            fetch_s[p.node] += p.read_s

    def rate(node: str, kind: str) -> float | None:
        s = busy.get((node, kind), 0.0)
        return events[node, kind] / s if s > 0 and events[node, kind] else None

    nodes = {p.node for p in packets}
    return {
        n: NodeRates(
            cached_events_per_s=rate(n, "cache"),
            peer_events_per_s=rate(n, "peer"),
            tertiary_events_per_s=None,
            tertiary_bytes_per_s=fetched[n] / fetch_s[n] if fetch_s.get(n) else None,
        )
        for n in nodes
    }


async def cache_by_name(opts: ClusterOptions) -> dict[str, list[str]]:
    async with open_cluster(opts) as (client, _):
        assert client.scheduler is not None
        info = await client.scheduler.identity()
        names = {addr: str(w.get("name")) for addr, w in info.get("workers", {}).items()}
        contents: dict[str, list[str]] = await client.run(cache_contents)
        return {names[a]: urls for a, urls in contents.items() if a in names}


def snapshot_of(
    specs: list[JobSpec],
    opts: ClusterOptions,
    caches: dict[str, list[str]],
    rates: dict[str, NodeRates],
) -> ClusterSnapshot:
    nodes = tuple(
        NodeSnapshot(name, opts.slots, opts.cache_bytes, tuple(sorted(caches[name])),
                     rates.get(name, NodeRates()))
        for name in sorted(caches)
    )  # fmt: skip
    jobs = []
    for s in specs:
        files = []
        for index, a, b in s.dataset.locate(s.start, s.stop):
            f = s.dataset.files[index]
            files.append(FileTodo(f.url, f.n_events, f.n_bytes, ((a, b),)))
        jobs.append(JobSnapshot(s.id, s.id, tuple(files), 0.0))
    return ClusterSnapshot(0.0, nodes, tuple(jobs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="A scratch directory.")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--warmup-jobs", type=int, default=3)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--tertiary-mb-s", type=float, default=0.5)
    ap.add_argument("--policies", default="farm,out-of-order")
    ap.add_argument("--warmup-policy", default="out-of-order")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    catalog = out / "data" / "catalog.yaml"
    if not catalog.exists():
        catalog = write_demo_dataset(out / "data", n_events=args.events, n_files=args.files)
    specs = [
        dataclasses.replace(s, submit_s=0.0)
        for s in load_jobs(demo_workload(catalog, out, args.jobs))
    ]
    opts = ClusterOptions(
        workers=args.workers,
        cache_bytes=int(CACHE_FRACTION * job_space(specs).n_bytes * 1.05),
        cache_root=out / "caches",
        tertiary_bytes_per_s=args.tertiary_mb_s * 1e6,
    )
    config = EngineConfig(queue_s=0.5)
    packets = PacketSizing(target_s=0.5, min_events=500)
    warmup = args.warmup_policy
    warm = asyncio.run(
        run_jobs(specs[: args.warmup_jobs], opts, policy=warmup, config=config, packets=packets,
                 policy_params=DEMO_POLICY_PARAMS.get(warmup, {}), cold=True, calibrate=False)
    )  # fmt: skip
    rates = measured_rates(warm.packets, config.packets_in_flight)
    saved = out / "caches-warm"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(opts.cache_root, saved)
    snap = snapshot_of(specs, opts, asyncio.run(cache_by_name(opts)), rates)
    (out / "snapshot.json").write_text(json.dumps(snap.as_dict(), indent=1))
    bps = opts.tertiary_bytes_per_s
    throttled = dataclasses.replace(
        snap,
        nodes=tuple(
            dataclasses.replace(n, rates=dataclasses.replace(n.rates, tertiary_bytes_per_s=bps))
            for n in snap.nodes
        ),
    )
    rows: list[dict[str, Any]] = []
    moved: dict[str, float] = {}
    """Bytes each real run read from central storage, against the jobs' distinct bytes."""
    distinct = sum(f.n_bytes for f in {f.url: f for j in snap.jobs for f in j.files}.values())
    for policy in args.policies.split(","):
        params = DEMO_POLICY_PARAMS.get(policy, {})
        predicted = predict(snap, policy, params)
        # The same with the configured throttle as every node's fetch rate: what the
        # predictor does when the tertiary rate is known rather than measured from packets.
        known = predict(throttled, policy, params)
        shutil.rmtree(opts.cache_root)
        shutil.copytree(saved, opts.cache_root)
        real = asyncio.run(
            run_jobs(specs, opts, policy=policy, policy_params=params, config=config,
                     packets=packets, calibrate=False)
        )  # fmt: skip
        moved[policy] = real.bytes_from_tertiary
        for j in real.jobs:
            actual = j.wall_s  # submitted at 0
            eta = predicted.jobs[j.id]
            rows.append(
                {
                    "policy": policy,
                    "job": j.id,
                    "predicted_s": eta,
                    "throttle_predicted_s": known.jobs[j.id],
                    "actual_s": actual,
                    "error_s": None if eta is None else eta_error(eta, actual),
                    "relative": None if eta is None else eta_error(eta, actual) / max(actual, 1.0),
                }
            )
        rows.append(
            {
                "policy": policy,
                "job": "makespan",
                "predicted_s": predicted.makespan_s,
                "throttle_predicted_s": known.makespan_s,
                "actual_s": real.makespan_s,
                "error_s": eta_error(predicted.makespan_s, real.makespan_s),
                "relative": eta_error(predicted.makespan_s, real.makespan_s)
                / max(real.makespan_s, 1.0),
            }
        )
    alt_summary = {
        p: statistics.median(
            abs(eta_error(r["throttle_predicted_s"], r["actual_s"])) / max(r["actual_s"], 1.0)
            for r in rows
            if r["policy"] == p and r["job"] != "makespan" and r["throttle_predicted_s"] is not None
        )
        for p in args.policies.split(",")
    }
    summary = {
        p: statistics.median(
            abs(r["relative"]) for r in rows
            if r["policy"] == p and r["job"] != "makespan" and r["relative"] is not None
        )
        for p in args.policies.split(",")
    }  # fmt: skip
    if args.json:
        doc = {"rows": rows, "median_abs_relative_error": summary, "tertiary_bytes": moved,
               "median_abs_relative_error_throttle": alt_summary}  # fmt: skip
        print(json.dumps({**doc, "distinct_bytes": distinct}))
        return 0
    head = f"{'policy':<14}{'job':<10}{'predicted s':>12}{'(throttle)':>11}{'actual s':>10}"
    print(f"{head}{'error s':>9}{'rel':>7}")
    for r in rows:
        pred = "fails" if r["predicted_s"] is None else f"{r['predicted_s']:.1f}"
        err = "-" if r["error_s"] is None else f"{r['error_s']:+.1f}"
        rel = "-" if r["relative"] is None else f"{r['relative']:+.0%}"
        known_s = r["throttle_predicted_s"]
        alt = "fails" if known_s is None else f"{known_s:.1f}"
        line = f"{r['policy']:<14}{r['job']:<10}{pred:>12}{alt:>11}{r['actual_s']:>10.1f}"
        print(f"{line}{err:>9}{rel:>7}")
    for p, m in summary.items():
        print(
            f"{p}: median |relative error| of the jobs' ETAs {m:.0%} "
            f"({alt_summary[p]:.0%} with the throttle as the fetch rate)"
        )
    for p, b in moved.items():
        print(f"{p}: read {b / 1e6:.1f} MB from central storage ({distinct / 1e6:.1f} MB distinct)")
    print("measured rates:", {n: dataclasses.asdict(r) for n, r in sorted(rates.items())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
