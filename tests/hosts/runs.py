"""Runs across the test hosts, shared by the multi-host tests: a run from this namespace (the
client) through the scheduler host to the worker hosts, its checks (every event once, the
single-host results), and faults set off mid-run by the run's own progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from datasched.core.intervals import IntervalSet
from datasched.core.packets import PacketSizing
from datasched.policies import available, build_policy
from datasched.runtime.cluster import cache_by_name
from datasched.runtime.datamoves import FileToMove, move_files
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig, RunReport
from datasched.runtime.session import (
    ClusterOptions,
    build_scheduler,
    default_calibration,
    job_space,
    open_cluster,
)
from datasched.runtime.worker import clear_cache
from hosts_support import Topology

N_EVENTS = 24_000
N_FILES = 12
N_JOBS = 6
FAST = EngineConfig(queue_s=0.3, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.2, min_events=300)
CALIBRATION = default_calibration(None, 2e-5)
"""The demo processor's cost given, not measured: a calibration reads through a worker's
cache and would change what each caches, and costs a run's seconds."""
SMALL_CACHE_HOST = "w1"
SMALL_CACHE_MB = 96
"""The worker whose cache directory is a tmpfs of its own, with room for the whole cache
(50 MB) until a test shrinks it (``Topology.resize_cache``). The first node: every policy
gives it work (delayed scheduling left the fourth idle in a run of these six jobs)."""


@dataclass(frozen=True)
class Workload:
    """The demo's jobs on the storage host, the same files on this host, and each job's
    histogram from a run on one host (the embedded cluster, local files)."""

    jobs_file: Path
    local_jobs_file: Path
    reference: dict[str, list[float]]
    n_events: int

    def specs(self, out: Path) -> list[JobSpec]:
        """The jobs, their outputs under ``out`` (each test its own)."""
        doc = yaml.safe_load(self.jobs_file.read_text())
        for job in doc["jobs"]:
            job["output"] = str(out / f"{job['id']}.pkl")
        path = out / "jobs.yaml"
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_jobs(path)


def counts(result: Any) -> list[float]:
    return [float(x) for x in result["mass"].values()]


POLICY_PARAMS: dict[str, dict[str, Any]] = {
    "delayed": {"period_h": 0.5 / 3600},
    "basic-packetizer": {"fraction": 4},
    "adaptive-packetizer": {"priorities": "default=1", "levels": 10},
    # Peer reads between the hosts' caches, as the demo runs it.
    "out-of-order": {"replication": True},
}
"""Parameters for runs of seconds (delayed scheduling's default period is two days; the basic
packetizer's default packets would be a tenth of a second)."""

POLICIES = sorted(available())


def params(policy: str) -> dict[str, Any]:
    return POLICY_PARAMS.get(policy, {})


def reads_peers(policy: str) -> bool:
    """Whether the policy reads data a peer caches from that peer."""
    return build_policy(policy, **params(policy)).reads.peer_reads


CACHING_POLICIES = [p for p in POLICIES if build_policy(p, **params(p)).reads.cache_fill]
"""The policies whose workers keep what they read: the faults' subjects."""


@dataclass
class FaultAt:
    """A progress sink that calls ``action`` once, when ``after_events`` events of the run
    are counted (mid-run, whatever the machine's speed); ``at`` is when, by the monotonic
    clock, and ``done_at`` when the last job ended."""

    action: Callable[[], None]
    after_events: int
    ready: Callable[[], bool] | None = None
    """A further condition the fault waits for, asked at each count after ``after_events``
    (on the master's loop: it must not block)."""
    counted: int = 0
    started: float | None = None
    """When the first job started (about the run's time 0)."""
    at: float | None = None
    at_wall: float | None = None
    """``at`` on the wall clock (the run's report times its events from a wall-clock start)."""
    done_at: float | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    thread: threading.Thread | None = None
    """Where ``action`` runs (a test joins it before reading what it measured)."""

    def job_started(self, job_id: str, n_events: int) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None:
        self.counted += n_events
        if (
            self.at is None
            and self.counted >= self.after_events
            and (self.ready is None or self.ready())
        ):
            self.at, self.at_wall = time.monotonic(), time.time()
            # Off the master's loop: a fault may take a moment (a server killed and awaited).
            self.thread = threading.Thread(target=self.action, daemon=True)
            self.thread.start()

    def job_done(self, job_id: str, status: str) -> None:
        self.statuses[job_id] = status
        self.done_at = time.monotonic()


def options(topo: Topology, tmp_path: Path) -> ClusterOptions:
    """The hosts' cluster: four workers, each with its own cache directory (its
    DATASCHED_CACHE_DIR overrides ``cache_root``, a path no worker host uses)."""
    return ClusterOptions(
        workers=len(topo.workers),
        cache_bytes=50 * 10**6,
        cache_root=tmp_path / "not-used-by-the-workers",
        scheduler_address=topo.scheduler_address,
    )


async def run_on_hosts(
    topo: Topology,
    specs: list[JobSpec],
    policy: str,
    tmp_path: Path,
    *,
    progress: Any = None,
    prefill: list[tuple[str, str, int]] | None = None,
    cold: bool = True,
    before: Callable[[], None] | None = None,
    on_engine: Callable[[RuntimeEngine], None] | None = None,
) -> tuple[RunReport, RuntimeEngine]:
    """Run ``specs`` under ``policy`` across the hosts with cold caches (``cold=False``: with
    what the workers cache from an earlier run); ``prefill``: files ``(worker, url, bytes)``
    copied into a worker's cache first (where a policy that reads data where it lies finds
    it); ``before``: called once the caches are ready, just before the run starts;
    ``on_engine``: given the engine before it runs (a fault that watches the master's state)."""
    opts = options(topo, tmp_path)
    async with open_cluster(opts) as (client, names):
        assert names == topo.workers
        if cold:
            await client.run(clear_cache)
        if prefill:
            assert client.scheduler is not None
            addrs = {
                str(w["name"]): a for a, w in (await client.scheduler.identity())["workers"].items()
            }
            by_worker: dict[str, list[FileToMove]] = {}
            for worker, url, n_bytes in prefill:
                by_worker.setdefault(worker, []).append(FileToMove(url, n_bytes))
            for worker, moves in by_worker.items():
                moved = await client.submit(move_files, moves, workers=[addrs[worker]], pure=False)
                assert sorted(moved.cached) == sorted(m.url for m in moves)
        if before is not None:
            before()
        sched = build_scheduler(
            len(names),
            opts,
            job_space(specs),
            CALIBRATION,
            policy=policy,
            policy_params=params(policy),
            packets=PACKETS,
        )
        engine = RuntimeEngine(client, sched, names, config=FAST, progress=progress)
        if on_engine is not None:
            on_engine(engine)
        report = await engine.run(specs, known_cache=await cache_by_name(client))
    return report, engine


def holds_packets(engine: RuntimeEngine, worker: str) -> bool:
    """Whether the master has packets in flight on ``worker`` (a cut then holds the run up
    until the scheduler drops the host: their results can no longer arrive)."""
    return any(
        slot.inflight and engine.workers[slot.node].name == worker for slot in engine.slots.values()
    )


def check_exactly_once(report: RunReport, specs: list[JobSpec], workload: Workload) -> None:
    """Every job completed; its packets cover its events exactly, none twice; its histogram
    (in the report and in its output file) equals the single-host run's."""
    import pickle

    for spec, job in zip(specs, report.jobs, strict=True):
        assert job.status == "completed", (spec.id, job.error)
        assert job.events_processed == job.events_expected == spec.stop - spec.start
        mine = [p for p in report.packets if p.job == spec.id]
        covered = IntervalSet((p.start, p.stop) for p in mine)
        assert covered.length == sum(p.n_events for p in mine) == job.events_expected
        counts = [float(x) for x in report.results[spec.id]["mass"].values()]
        assert counts == workload.reference[spec.id], spec.id
        with spec.output.open("rb") as fh:
            assert [float(x) for x in pickle.load(fh)["mass"].values()] == counts
