"""The uneven-data experiment of the PROOF paper (§2.3) scaled down to a local Dask cluster:
the basic and the adaptive packetizer on real workers.

A few Dask workers process (one slot each); a few more are *file servers*: workers of no slot
whose caches hold files (the runtime reads them from there over Dask's comms, as a packet
that may read from peers does). The demo data set's files are placed on the nodes unevenly
(log-normal weights, as in the simulator's experiment) by copying them into the nodes' cache
directories before the run, so the core's directory starts out knowing where every file is.

What is emulated, and why: each packet runs the demo analysis and then waits
``cpu_ms_per_event`` per event (:class:`EmulatedAnalysis`), a worker's own CPU as the paper's
nodes had one each; the cores of one machine are shared by all its workers (and here by
other users), so a real CPU load would measure the machine, not the schedule. Reads are
real: a local cache file, or a peer's over TCP. Disks are not throttled (one machine's page
cache serves every "disk"), so the file servers' disk contention that makes the paper's tail
is absent: docs/proof.md discusses what that does to the ratio.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from datasched.core.model import Node, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.runtime.demodata import DimuonMass, write_demo_dataset
from datasched.runtime.diskcache import DiskCache
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import load_jobs
from datasched.runtime.reports import EngineConfig, PacketStat
from datasched.runtime.session import (
    ClusterOptions,
    default_calibration,
    job_space,
    open_cluster,
)
from datasched.runtime.worker import cache_contents, node_cache_dir
from datasched.studies.claims import Measured

__all__ = [
    "EmulatedAnalysis",
    "RuntimeUneven",
    "RuntimeUnevenRun",
    "measure_runtime",
    "run_uneven_runtime",
]


class EmulatedAnalysis(DimuonMass):
    """The demo analysis, then ``cpu_ms_per_event`` of emulated CPU per event (a sleep)."""

    def __init__(self, cpu_ms_per_event: float = 1.0) -> None:
        if not cpu_ms_per_event >= 0:
            raise ValueError(f"cpu_ms_per_event: must not be negative, got {cpu_ms_per_event!r}")
        self.cpu_ms_per_event = cpu_ms_per_event

    def process(self, events: Any) -> dict[str, Any]:
        out = super().process(events)
        time.sleep(len(events) * self.cpu_ms_per_event / 1e3)
        return out


@dataclass(frozen=True, slots=True)
class RuntimeUneven:
    """The scaled-down setup: ``workers`` processing workers and ``servers`` file servers on
    this machine, ``files`` demo files of ``file_events`` events placed unevenly."""

    workers: int = 4
    servers: int = 2
    files: int = 24
    file_events: int = 1000
    cpu_ms_per_event: float = 1.0
    spread: float = 1.0
    seed: int = 3

    def __post_init__(self) -> None:
        for name in ("workers", "files", "file_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)!r}")
        if self.servers < 0:
            raise ValueError(f"servers: must not be negative, got {self.servers!r}")

    @property
    def nodes(self) -> int:
        return self.workers + self.servers

    def placement(self) -> list[int]:
        """The node of each file (log-normal weights per node, as the simulator's)."""
        rng = random.Random(self.seed)
        weights = [rng.lognormvariate(0.0, self.spread) for _ in range(self.nodes)]
        return rng.choices(range(self.nodes), weights=weights, k=self.files)

    def topology(self, cache_bytes: int, tertiary_bytes_per_s: float) -> Topology:
        return Topology(
            tuple(
                Node(
                    i,
                    cache_bytes,
                    slots=1 if i < self.workers else 0,
                    tertiary_bytes_per_s=tertiary_bytes_per_s,
                )
                for i in range(self.nodes)
            )
        )


@dataclass(frozen=True, slots=True)
class RuntimeUnevenRun:
    """One packetizer's run: its processing time (first packet out to last result back)."""

    policy: str
    time_s: float
    packets: tuple[PacketStat, ...]
    workers: int

    @property
    def idle_between_s(self) -> float:
        """Summed over the workers: time from a packet's result reaching the master to the
        start of the worker's next packet (what a pull costs, a packet at a time)."""
        total = 0.0
        for node in {p.node for p in self.packets}:
            mine = sorted((p.t_start, p.t_end) for p in self.packets if p.node == node)
            total += sum(max(nxt[0] - cur[1], 0.0) for cur, nxt in itertools.pairwise(mine))
        return total

    @property
    def tail_fraction(self) -> float:
        """The fraction of the processing time during which fewer than half the workers had
        a packet running (from each packet's start on its worker to its result's return)."""
        if not self.packets or self.time_s <= 0:
            return 0.0
        t0 = min(p.t_start for p in self.packets)
        edges = sorted({p.t_start for p in self.packets} | {p.t_end for p in self.packets})
        short = 0.0
        for a, b in itertools.pairwise(edges):
            mid = (a + b) / 2
            active = {p.node for p in self.packets if p.t_start <= mid < p.t_end}
            if len(active) < self.workers / 2:
                short += b - a
        end = max(p.t_end for p in self.packets)
        return short / max(end - t0, 1e-9)


def _prepare(setup: RuntimeUneven, out_dir: Path) -> Path:
    """The demo files and the job file (one job over every event)."""
    data = out_dir / "data"
    catalog = write_demo_dataset(
        data, n_events=setup.files * setup.file_events, n_files=setup.files, seed=setup.seed
    )
    doc = {
        "catalog": str(catalog),
        "jobs": [
            {
                "id": "uneven",
                "dataset": "zmumu",
                "processor": f"{__name__}:EmulatedAnalysis",
                "processor_args": {"cpu_ms_per_event": setup.cpu_ms_per_event},
                "output": str(out_dir / "out" / "uneven.pkl"),
            }
        ],
    }
    jobs = out_dir / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(doc))
    return jobs


def _place(setup: RuntimeUneven, root: Path, files: list[tuple[str, Path, int]], cap: int) -> None:
    """Copy each file into its node's cache directory (node ``i`` is worker ``str(i)``)."""
    shutil.rmtree(root, ignore_errors=True)
    for (url, path, size), node in zip(files, setup.placement(), strict=True):
        cache = DiskCache(node_cache_dir(str(root), str(node)), cap)
        cache.release(cache.acquire(url, size, _copier(path, size)))


def _copier(src: Path, size: int) -> Callable[[Path], int]:
    def copy(dest: Path) -> int:
        shutil.copyfile(src, dest)
        return size

    return copy


async def _run(setup: RuntimeUneven, jobs: Path, root: Path, policy: str) -> RuntimeUnevenRun:
    specs = load_jobs(jobs)
    space = job_space(specs)
    files = [(f.name, Path(f.name), f.n_bytes) for f in space.files]
    cap = 2 * sum(f.n_bytes for f in space.files)
    _place(setup, root, files, cap)
    opts = ClusterOptions(workers=setup.nodes, slots=1, cache_bytes=cap, cache_root=root)
    calibration = default_calibration(None, setup.cpu_ms_per_event / 1e3)
    async with open_cluster(opts) as (client, names):
        if sorted(names) != [str(i) for i in range(setup.nodes)]:
            raise RuntimeError(f"expected workers 0..{setup.nodes - 1}, got {names}")
        sched = Scheduler(
            setup.topology(cap, calibration.tertiary_bytes_per_s),
            space,
            build_policy(policy),
            cost=calibration.cost,
        )
        engine = RuntimeEngine(client, sched, names, config=EngineConfig(queue_s=0.5))
        contents: dict[str, list[str]] = await client.run(cache_contents)
        info = await client.scheduler.identity()  # type: ignore[union-attr]
        by_addr = {a: str(w.get("name")) for a, w in info.get("workers", {}).items()}
        known = {by_addr[a]: urls for a, urls in contents.items() if a in by_addr}
        report = await engine.run(specs, known_cache=known)
    job = report.jobs[0]
    if job.status != "completed" or job.events_processed != job.events_expected:
        raise RuntimeError(f"{policy}: the uneven job did not complete: {job.error}")
    packets = tuple(report.packets)
    t0 = min(p.t_start for p in packets)
    return RuntimeUnevenRun(policy, max(p.t_end for p in packets) - t0, packets, setup.workers)


def run_uneven_runtime(
    setup: RuntimeUneven, out_dir: Path
) -> tuple[RuntimeUnevenRun, RuntimeUnevenRun]:
    """The basic, then the adaptive packetizer on the same placement (a fresh cluster each)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = _prepare(setup, out_dir)
    return tuple(  # type: ignore[return-value]
        asyncio.run(_run(setup, jobs, out_dir / f"caches-{policy}", policy))
        for policy in ("basic-packetizer", "adaptive-packetizer")
    )


QUICK = RuntimeUneven(workers=3, servers=1, files=12)
FULL = RuntimeUneven()


def measure_runtime(quick: bool) -> Measured:
    """The claim ``adaptive_over_basic_time_runtime``: one run of each packetizer (in a
    temporary directory, removed after), with what the report's note says of them."""
    setup = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="datasched-proof-") as tmp:
        basic, adaptive = run_uneven_runtime(setup, Path(tmp))
    placement = setup.placement()
    on_servers = sum(n >= setup.workers for n in placement)
    detail = (
        f"{setup.workers} workers and {setup.servers} file servers (Dask workers of no slot "
        f"whose caches hold files) on this machine; {setup.files} files of "
        f"{setup.file_events} events, {on_servers} of them on the file servers, the busiest "
        f"node holding {max(placement.count(n) for n in set(placement))}; "
        f"{setup.cpu_ms_per_event:g} ms of emulated CPU an event. One run each: basic "
        f"{basic.time_s:.1f} s in {len(basic.packets)} packets (tail fraction "
        f"{basic.tail_fraction:.2f}), adaptive {adaptive.time_s:.1f} s in "
        f"{len(adaptive.packets)} packets (tail fraction {adaptive.tail_fraction:.2f}). "
        f"Worker time between a packet's result and the next packet's start (the master's "
        f"round trip, a pull a packet): basic {basic.idle_between_s:.1f} s, adaptive "
        f"{adaptive.idle_between_s:.1f} s in all. Disks are not throttled here (one page "
        "cache serves every node's), so the file servers' contention that makes the paper's "
        "tail is absent (docs/proof.md)"
    )
    return Measured(
        adaptive.time_s / basic.time_s,
        {"detail": detail},
    )
