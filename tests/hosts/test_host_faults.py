"""Network and storage faults across the test hosts, under every caching policy: a worker
host's link slowed to a tenth, cut for good, partitioned for 20 s, and the storage host's
XRootD killed and restarted mid-run. Each run ends with every job complete and every event
counted once, with the results of a run on one host.

The figures (makespans against the same run without the fault, how long the scheduler took to
drop a cut host, when a healed host was back) are appended as JSON lines to the file named by
``DATASCHED_HOSTS_FIGURES`` (docs/deployment.md quotes them)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec, load_jobs
from hosts.runs import (
    CACHING_POLICIES,
    FaultAt,
    Workload,
    check_exactly_once,
    holds_packets,
    run_on_hosts,
)
from hosts_support import Topology

pytestmark = pytest.mark.hosts

VICTIM = "w2"
BASELINES: dict[str, float] = {}
"""Each policy's makespan without a fault, measured once (by the first test that needs it)."""


def record(**figures: Any) -> None:
    path = os.environ.get("DATASCHED_HOSTS_FIGURES")
    if path:
        with Path(path).open("a") as fh:
            fh.write(json.dumps(figures) + "\n")


def baseline(topo: Topology, workload: Workload, policy: str, tmp_path: Path) -> float:
    if policy not in BASELINES:
        specs = workload.specs(tmp_path / "baseline")
        report, _ = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path))
        check_exactly_once(report, specs, workload)
        BASELINES[policy] = report.makespan_s
    return BASELINES[policy]


def wait_until(cond: Any, timeout_s: float, over: threading.Event | None = None) -> float | None:
    """When ``cond()`` first held (monotonic clock), polled every 0.1 s; None: it never did.

    ``cond`` asks the scheduler, which closes with the run: once ``over`` is set (the run has
    ended), an unreachable scheduler ends the wait with None instead of raising in the fault's
    thread; before that, a failed poll is tried again (a loaded scheduler can be slow to
    answer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cond():
                return time.monotonic()
        except (OSError, TimeoutError):
            if over is not None and over.is_set():
                return None
        if over is not None and over.is_set():
            return None
        time.sleep(0.1)
    return None


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_slow_link(policy: str, topo: Topology, workload: Workload, tmp_path: Path) -> None:
    """A straggler: one worker host's link at a tenth of the others' for the whole run."""
    base = baseline(topo, workload, policy, tmp_path)
    assert topo.worker_mbit is not None
    slow = topo.worker_mbit / 10
    topo.limit(VICTIM, out_mbit=slow, in_mbit=slow)
    specs = workload.specs(tmp_path / "out")
    report, engine = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path))
    check_exactly_once(report, specs, workload)
    assert engine.worker_departures == 0
    share = sum(p.n_events for p in report.packets if p.node == VICTIM) / sum(
        p.n_events for p in report.packets
    )
    record(
        fault="slow link",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        baseline_s=round(base, 2),
        ratio=round(report.makespan_s / base, 2),
        slow_host_share=round(share, 3),
    )


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_link_cut_for_good(policy: str, topo: Topology, workload: Workload, tmp_path: Path) -> None:
    """A worker host's link cut mid-run and never restored during the run: the scheduler drops
    it (its heartbeats stop), the master writes its packets off and its work goes elsewhere."""
    base = baseline(topo, workload, policy, tmp_path)
    gone: list[float | None] = []
    over = threading.Event()
    engines: list[RuntimeEngine] = []
    victim: list[str] = []

    def holding() -> bool:
        """Whether a host holds packets now (the first such of VICTIM and then the others):
        it is the one cut. A host idle at the cut let the run end before the scheduler dropped
        it, and then nothing of this fault was tested; sjf-data, with cold caches, sometimes
        runs every job on the first host, whose cache has the files first (seen twice in
        four runs)."""
        for host in (VICTIM, *(w for w in topo.workers if w != VICTIM)):
            if engines and holds_packets(engines[0], host):
                victim.append(host)
                return True
        return False

    def cut() -> None:
        topo.cut(victim[0])
        gone.append(wait_until(lambda: victim[0] not in topo.connected(), 60, over))

    fault = FaultAt(cut, after_events=workload.n_events // 10, ready=holding)
    specs = workload.specs(tmp_path / "out")
    try:
        report, engine = asyncio.run(
            run_on_hosts(topo, specs, policy, tmp_path, progress=fault, on_engine=engines.append)
        )
    finally:
        over.set()
    assert fault.thread is not None
    fault.thread.join(70)
    check_exactly_once(report, specs, workload)
    assert fault.at is not None
    assert fault.at_wall is not None
    assert engine.worker_departures >= 1
    # The master wrote the host off during the run (its summary names it).
    lost = [w for w in report.workers_lost if w["worker"] == victim[0]]
    assert lost, (victim, report.workers_lost)
    assert gone, "the fault's thread ended without a word"
    # When the scheduler dropped the host, as the fault's thread saw it; where the run ended
    # between the master's poll and the thread's (it asks the scheduler about every second on
    # a loaded machine), the master's own record of the loss, on the same wall clock.
    seen_by = "scheduler" if gone[0] is not None else "master"
    dropped_after = (
        gone[0] - fault.at
        if gone[0] is not None
        else report.started_wall + lost[0]["lost_s"] - fault.at_wall
    )
    assert dropped_after > 0
    record(
        fault="link cut",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        baseline_s=round(base, 2),
        dropped_after_s=round(dropped_after, 1),
        dropped_seen_by=seen_by,
        host=victim[0],
    )


def spread(specs: list[JobSpec], tmp_path: Path, every_s: float) -> list[JobSpec]:
    """The same jobs submitted ``every_s`` apart: a run that lasts past a partition."""
    path = specs[0].output.parent / "jobs.yaml"
    doc = yaml.safe_load(path.read_text())
    for i, job in enumerate(doc["jobs"]):
        job["submit_s"] = every_s * i
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_jobs(path)


PARTITION_S = 20.0
PARTITION_EVERY_S = 10.0
"""The partitioned run's jobs are submitted this far apart (six jobs: the last at 50 s), so
that it still runs when the healed host is back: on the loaded 2-core test machine a worker
cut off at the run's first packet was back 35-45 s after the cut (12 s for its connection to
the scheduler to break, a few seconds for its reads to give up, then its supervisor's restart:
two interpreters, the nanny's and the worker's, about 13 s under load)."""


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_partition_that_heals(
    policy: str, topo: Topology, workload: Workload, tmp_path: Path
) -> None:
    """A worker host cut off for 20 s, then back: the scheduler drops it, its worker (which
    lost the scheduler and closed) is restarted by its supervisor and joins again under its
    name; the packets it held when cut are never counted, the run uses it again.

    The link stays cut until the scheduler has dropped the host, should that take longer than
    20 s (a loaded scheduler): a partition shorter than the timeouts is no partition to Dask
    (TCP carries the connections over it), and not this fault."""
    times: dict[str, float | None] = {}
    over = threading.Event()

    def partition() -> None:
        topo.cut(VICTIM)
        times["dropped"] = wait_until(lambda: VICTIM not in topo.connected(), 60, over)
        time.sleep(max(PARTITION_S - (time.monotonic() - (fault.at or 0)), 0))
        topo.heal(VICTIM)
        times["healed"] = time.monotonic()
        times["back"] = wait_until(lambda: VICTIM in topo.connected(), 120, over)

    fault = FaultAt(partition, after_events=1)
    specs = spread(workload.specs(tmp_path / "out"), tmp_path, every_s=PARTITION_EVERY_S)
    try:
        report, engine = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path, progress=fault))
    finally:
        over.set()
    assert fault.thread is not None
    fault.thread.join(200)
    check_exactly_once(report, specs, workload)
    assert fault.at is not None
    assert engine.worker_departures >= 1
    dropped, healed, back = times.get("dropped"), times.get("healed"), times.get("back")
    assert dropped is not None, times
    assert healed is not None, times
    assert back is not None, times
    assert fault.done_at is not None
    since_cut = {k: round(v - fault.at, 1) for k, v in times.items() if v is not None}
    # Back while the run still ran: the master took it as the node joining again mid-run.
    assert back < fault.done_at, (since_cut, round(fault.done_at - fault.at, 1))
    after_heal = [
        p for p in report.packets if p.node == VICTIM and p.t_end > back - (fault.started or 0)
    ]
    record(
        fault="partition 20 s",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        dropped_after_s=round(dropped - fault.at, 1),
        healed_after_s=round(healed - fault.at, 1),
        back_after_heal_s=round(back - healed, 1),
        packets_on_victim_after_heal=len(after_heal),
    )


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_storage_restarted(policy: str, topo: Topology, workload: Workload, tmp_path: Path) -> None:
    """The storage host's XRootD killed at the run's first packet and started again 3 s later,
    its link slowed so that reads are in flight: they are retried, nothing fails."""
    base = baseline(topo, workload, policy, tmp_path)
    down_s = 3.0
    topo.limit("storage", out_mbit=4.0)
    restarted = threading.Event()

    def restart() -> None:
        topo.stop_storage()
        time.sleep(down_s)
        topo.start_storage()
        restarted.set()

    fault = FaultAt(restart, after_events=1)
    specs = workload.specs(tmp_path / "out")
    try:
        report, _ = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path, progress=fault))
    finally:
        restarted.wait(30)
        topo.limit("storage", out_mbit=topo.storage_mbit)
    check_exactly_once(report, specs, workload)
    assert fault.at is not None
    assert restarted.is_set()
    record(
        fault="storage restart",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        baseline_s=round(base, 2),
        down_s=down_s,
    )
