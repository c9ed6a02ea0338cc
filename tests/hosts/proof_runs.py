"""PROOF's uneven-data experiment (docs/proof.md, "The uneven job on the test hosts") across
the test hosts: file servers on storage hosts of their own, each behind a link of limited
rate, the four worker hosts processing, the basic and the adaptive packetizer on the same
placement. Shared by the ``hosts`` test (``test_host_proof.py``) and
``benchmarks/proof_hosts.py``.

A file server is a Dask worker of no slot on a storage host (node ``s1``, ``s2``, ...), whose
cache holds files; a packet reads them over Dask's comms (a peer read), which crosses the
server's link, limited by ``tc``'s token bucket. The core's directory knows every copy, as
PROOF's packetizers know which node holds which file; files served over XRootD are central
storage to the core, one location whatever the host, so they cannot stand for PROOF's file
servers. XRootD on ``s1`` holds the data set and fills the nodes' caches before each run
(the links unlimited then); no packet reads it.

A token bucket shares a constant rate over its readers: it emulates a network link (or a
disk that keeps its throughput whatever the number of readers), not a disk whose total
throughput falls as readers seek on it. :func:`server_throughput` measures which it is from
the packets' reads.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import hosts_support
from datasched.core.intervals import IntervalSet
from datasched.core.model import Node
from datasched.core.model import Topology as CoreTopology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.runtime.cluster import cache_by_name
from datasched.runtime.datamoves import FileToMove, move_files
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import ClusterOptions, default_calibration, job_space, open_cluster
from datasched.runtime.worker import clear_cache
from datasched.studies.proof.runtime_uneven import RuntimeUneven, RuntimeUnevenRun

POLICIES = ("basic-packetizer", "adaptive-packetizer")


@dataclass(frozen=True)
class HostsUneven:
    """The setup: ``servers`` file-server hosts whose links carry ``server_mbit`` each way
    out, the four worker hosts (links unlimited: a worker's own files are on its local disk),
    ``files`` demo files of ``file_events`` events placed as the single-host experiment
    places them (log-normal node weights, the same seed), ``cpu_ms_per_event`` of emulated
    CPU an event. With the defaults a worker reading a server alone uses about half of its
    link (a 45 KB file in 0.45 s against 1 s of CPU), as one reader used half a disk in the
    simulator's setup."""

    servers: int = 2
    files: int = 24
    file_events: int = 1000
    cpu_ms_per_event: float = 1.0
    server_mbit: float = 0.8
    seed: int = 3
    slots: int = 1
    """Processing slots a worker host (2: eight readers, more than the basic packetizer's
    limit of four on a file server, so that the limit can bind)."""

    def uneven(self) -> RuntimeUneven:
        return RuntimeUneven(
            workers=4,
            servers=self.servers,
            files=self.files,
            file_events=self.file_events,
            cpu_ms_per_event=self.cpu_ms_per_event,
            seed=self.seed,
        )

    def node_names(self) -> list[str]:
        """The single-host experiment's node ``i`` as a host here: workers, then servers."""
        return [f"w{i + 1}" for i in range(4)] + [f"s{i + 1}" for i in range(self.servers)]

    def placement(self) -> list[str]:
        """The host holding each file."""
        names = self.node_names()
        return [names[i] for i in self.uneven().placement()]


@contextmanager
def proof_hosts(servers: int) -> Iterator[hosts_support.Topology]:
    """The test hosts with ``servers`` storage hosts, each also running a Dask worker (its
    file server). The tag is the pid of a keeper process of its own (``cat`` on a pipe from
    this one, which ends when this process does), so it does not clash with the hosts tests'
    topology of this process, and a crashed run's is removed as stale by the next build."""
    keeper = subprocess.Popen(
        ["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
    )
    topo = None
    try:
        topo = hosts_support.build(
            tag=str(keeper.pid), n_storage=servers, storage_mbit=None, worker_mbit=None
        )
        for name in topo.storage:
            topo.cache_dir(name).mkdir(parents=True, exist_ok=True)
            topo._start_worker(name)
        topo.wait_ready(names=[*topo.workers, *topo.storage])
        topo.save()
        yield topo
    finally:
        if topo is not None:
            topo.down()
        assert keeper.stdin is not None
        keeper.stdin.close()
        keeper.wait(10)


def write_job(topo: hosts_support.Topology, setup: HostsUneven, out: Path) -> Path:
    """The demo data set on ``s1``'s XRootD and a job over every event (the emulated CPU)."""
    local = out / "data"
    catalog = write_demo_dataset(
        local, n_events=setup.files * setup.file_events, n_files=setup.files, seed=setup.seed
    )
    export = topo.export_dir("s1")
    for f in sorted(local.glob("*.root")):
        shutil.copy(f, export / f.name)
        (export / f.name).chmod(0o644)
    doc = yaml.safe_load(catalog.read_text())
    for f in doc["datasets"]["zmumu"]["files"]:
        f["url"] = f"{topo.storage_url('s1')}/{f['url']}"
    (out / "catalog.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    jobs = {
        "catalog": str(out / "catalog.yaml"),
        "jobs": [
            {
                "id": "uneven",
                "dataset": "zmumu",
                "processor": "datasched.studies.proof.runtime_uneven:EmulatedAnalysis",
                "processor_args": {"cpu_ms_per_event": setup.cpu_ms_per_event},
                "output": str(out / "out" / "uneven.pkl"),
            }
        ],
    }
    path = out / "jobs.yaml"
    path.write_text(yaml.safe_dump(jobs))
    return path


@dataclass(frozen=True)
class HostsRun:
    run: RuntimeUnevenRun
    counts: list[float]
    """The job's histogram (equal under both packetizers)."""
    covered: int
    """Events its packets cover (each once: checked)."""


async def run_packetizer(
    topo: hosts_support.Topology, setup: HostsUneven, specs: list[JobSpec], policy: str, tmp: Path
) -> HostsRun:
    """One run: caches cleared and filled by the placement (links unlimited), the servers'
    links limited, the job under ``policy``; every event checked to be processed once."""
    space = job_space(specs)
    files = list(space.files)
    cap = 2 * sum(f.n_bytes for f in files)
    names_all = [*topo.workers, *topo.storage]
    opts = ClusterOptions(
        workers=len(names_all),
        slots=setup.slots,
        cache_bytes=cap,
        cache_root=tmp / "not-used-by-the-hosts",
        scheduler_address=topo.scheduler_address,
    )
    calibration = default_calibration(None, setup.cpu_ms_per_event / 1e3)
    for name in topo.storage:
        topo.limit(name)
    async with open_cluster(opts) as (client, names):
        assert sorted(names) == sorted(names_all), names
        await client.run(clear_cache)
        assert client.scheduler is not None
        addrs = {
            str(w["name"]): a for a, w in (await client.scheduler.identity())["workers"].items()
        }
        by_host: dict[str, list[FileToMove]] = {}
        for f, host in zip(files, setup.placement(), strict=True):
            by_host.setdefault(host, []).append(FileToMove(f.name, f.n_bytes))
        for host, moves in by_host.items():
            moved = await client.submit(move_files, moves, workers=[addrs[host]], pure=False)
            assert sorted(moved.cached) == sorted(m.url for m in moves), host
        for name in topo.storage:
            topo.limit(name, out_mbit=setup.server_mbit)
        servers = set(topo.storage)
        topology = CoreTopology(
            tuple(
                Node(
                    i,
                    cap,
                    slots=0 if name in servers else setup.slots,
                    tertiary_bytes_per_s=calibration.tertiary_bytes_per_s,
                )
                for i, name in enumerate(names)
            )
        )
        sched = Scheduler(topology, space, build_policy(policy), cost=calibration.cost)
        engine = RuntimeEngine(client, sched, names, config=EngineConfig(queue_s=0.5))
        report = await engine.run(specs, known_cache=await cache_by_name(client))
    for name in topo.storage:
        topo.limit(name)
    job = report.jobs[0]
    if job.status != "completed" or job.events_processed != job.events_expected:
        raise RuntimeError(f"{policy}: the uneven job did not complete: {job.error}")
    packets = tuple(report.packets)
    covered = IntervalSet((p.start, p.stop) for p in packets)
    if covered.length != sum(p.n_events for p in packets):
        raise RuntimeError(f"{policy}: some events were processed twice")
    t0 = min(p.t_start for p in packets)
    run = RuntimeUnevenRun(policy, max(p.t_end for p in packets) - t0, packets, 4)
    counts = [float(x) for x in report.results["uneven"]["mass"].values()]
    return HostsRun(run, counts, covered.length)


@dataclass(frozen=True)
class Throughput:
    """A file server's measured rate by the number of its concurrent readers: ``rates[n]``
    the median total bytes a second while ``n`` read it (each read's bytes over its time,
    times ``n``), and the contention coefficient ``c`` that fits ``B / (1 + c (n - 1))``
    best (least squares on ``1 / rate``; 0: a constant total, as a token bucket gives)."""

    rates: dict[int, float]
    samples: dict[int, int]
    contention: float


def server_throughput(
    runs: Sequence[HostsRun], placement: Sequence[str], urls: Sequence[str], servers: set[str]
) -> Throughput:
    """Each read from a file server (a packet whose file was copied from it), with the number
    of reads of that server overlapping its middle; see :class:`Throughput`."""
    host_of = dict(zip(urls, placement, strict=True))
    by_n: dict[int, list[float]] = {}
    for r in runs:
        reads = [
            (host_of[p.url], p.t_start, p.t_start + p.read_s, p.bytes_from_peer)
            for p in r.run.packets
            if p.source == "peer" and p.bytes_from_peer > 0 and host_of[p.url] in servers
        ]
        for host, a, b, n_bytes in reads:
            if b <= a:
                continue
            mid = (a + b) / 2
            n = sum(1 for h, a2, b2, _ in reads if h == host and a2 <= mid < b2)
            by_n.setdefault(max(n, 1), []).append(n_bytes / (b - a) * max(n, 1))
    rates = {n: statistics.median(v) for n, v in sorted(by_n.items())}
    samples = {n: len(v) for n, v in sorted(by_n.items())}
    return Throughput(rates, samples, fit_contention(rates, samples))


def fit_contention(rates: dict[int, float], samples: dict[int, int]) -> float:
    """``c`` of ``1 / rate(n) = (1 + c (n - 1)) / B``: a line in ``n - 1`` through the
    points, weighted by their samples; ``c`` is its slope over its intercept (never below
    0). 0 with fewer than two levels of ``n``."""
    if len(rates) < 2:
        return 0.0
    xs = [n - 1.0 for n in rates]
    ys = [1.0 / r for r in rates.values()]
    ws = [float(samples[n]) for n in rates]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    my = sum(w * y for w, y in zip(ws, ys, strict=True)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    if sxx == 0:
        return 0.0
    slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    return max(slope / intercept, 0.0) if intercept > 0 else 0.0


@dataclass(frozen=True)
class Experiment:
    setup: HostsUneven
    basic: list[HostsRun]
    adaptive: list[HostsRun]
    throughput: Throughput

    @property
    def ratios(self) -> list[float]:
        return [a.run.time_s / b.run.time_s for b, a in zip(self.basic, self.adaptive, strict=True)]

    @property
    def ratio(self) -> float:
        """Adaptive over basic: the median of the repeats' ratios (each pair run back to back,
        under the same load)."""
        return statistics.median(self.ratios)

    def summary(self) -> dict[str, Any]:
        placement = self.setup.placement()
        return {
            "setup": {
                "servers": self.setup.servers,
                "server_mbit": self.setup.server_mbit,
                "files": self.setup.files,
                "file_events": self.setup.file_events,
                "cpu_ms_per_event": self.setup.cpu_ms_per_event,
                "slots_per_worker": self.setup.slots,
                "files_per_host": {h: placement.count(h) for h in sorted(set(placement))},
            },
            "basic_s": [round(r.run.time_s, 2) for r in self.basic],
            "adaptive_s": [round(r.run.time_s, 2) for r in self.adaptive],
            "basic_packets": [len(r.run.packets) for r in self.basic],
            "adaptive_packets": [len(r.run.packets) for r in self.adaptive],
            "basic_tail": [round(r.run.tail_fraction, 3) for r in self.basic],
            "adaptive_tail": [round(r.run.tail_fraction, 3) for r in self.adaptive],
            "basic_peer_bytes": [_peer_bytes(r) for r in self.basic],
            "adaptive_peer_bytes": [_peer_bytes(r) for r in self.adaptive],
            "basic_idle_between_s": [round(r.run.idle_between_s, 2) for r in self.basic],
            "adaptive_idle_between_s": [round(r.run.idle_between_s, 2) for r in self.adaptive],
            "basic_read_s": [_total(r, "read_s") for r in self.basic],
            "adaptive_read_s": [_total(r, "read_s") for r in self.adaptive],
            "basic_compute_s": [_total(r, "compute_s") for r in self.basic],
            "adaptive_compute_s": [_total(r, "compute_s") for r in self.adaptive],
            "ratios": [round(x, 3) for x in self.ratios],
            "adaptive_over_basic": round(self.ratio, 3),
            "server_bytes_per_s_by_readers": {
                str(n): round(v) for n, v in self.throughput.rates.items()
            },
            "server_reads_by_readers": {str(n): v for n, v in self.throughput.samples.items()},
            "server_link_bytes_per_s": round(self.setup.server_mbit * 1e6 / 8),
            "fitted_contention": round(self.throughput.contention, 3),
            "load_average": os.getloadavg()[0],
        }


def _peer_bytes(r: HostsRun) -> int:
    """Bytes copied from other hosts (a peer read copies the packet's whole file)."""
    return sum(p.bytes_from_peer for p in r.run.packets)


def _total(r: HostsRun, name: str) -> float:
    """A packet statistic summed over the run's packets (seconds)."""
    return round(sum(float(getattr(p, name)) for p in r.run.packets), 2)


def run_experiment(
    topo: hosts_support.Topology, setup: HostsUneven, out: Path, repeats: int = 3
) -> Experiment:
    """``repeats`` pairs of runs, basic then adaptive, on the same placement."""
    out.mkdir(parents=True, exist_ok=True)
    specs = load_jobs(write_job(topo, setup, out))
    basic: list[HostsRun] = []
    adaptive: list[HostsRun] = []
    for k, policy in itertools.product(range(repeats), POLICIES):
        done = asyncio.run(run_packetizer(topo, setup, specs, policy, out / f"{policy}-{k}"))
        (basic if policy == POLICIES[0] else adaptive).append(done)
    urls = [f.name for f in job_space(specs).files]
    tp = server_throughput([*basic, *adaptive], setup.placement(), urls, set(topo.storage))
    return Experiment(setup, basic, adaptive, tp)
