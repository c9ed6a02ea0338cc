"""Fixtures of the multi-host tests: the namespace topology (``hosts_support``), the demo's
workload on its storage host, and the results of a single-host run of the same jobs.

Skipped, with the reason, where the topology cannot be built (not root, no ``ip``, ``tc`` or
``xrootd``), unless ``DATASCHED_REQUIRE_HOSTS=1`` (CI), which makes that a failure."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator

import pytest
import yaml

pytest.importorskip("distributed", reason="the runtime extra is not installed")

import dask.config

import hosts_support
from datasched.compare.demo import demo_workload
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import RunReport
from datasched.runtime.session import ClusterOptions, run_jobs
from hosts.runs import (
    CALIBRATION,
    FAST,
    N_EVENTS,
    N_FILES,
    N_JOBS,
    PACKETS,
    SMALL_CACHE_HOST,
    SMALL_CACHE_MB,
    Workload,
    counts,
)


@pytest.fixture(scope="session")
def hosts() -> Iterator[hosts_support.Topology]:
    """The topology, built once for the session: a storage host (XRootD, 40 Mbit/s), a
    scheduler host, four worker hosts on 20 Mbit/s links, the client in this namespace.
    One worker's cache disk is a tmpfs (room for the cache, which a cache-fault test shrinks
    to nothing for its runs)."""
    problem = hosts_support.missing_tools()
    if problem is not None:
        if os.environ.get("DATASCHED_REQUIRE_HOSTS") == "1":
            pytest.fail(f"the hosts tests are required (DATASCHED_REQUIRE_HOSTS=1): {problem}")
        pytest.skip(problem)
    topo = hosts_support.build(
        storage_mbit=40.0, worker_mbit=20.0, tmpfs_mb={SMALL_CACHE_HOST: SMALL_CACHE_MB}
    )
    # This process is the client: Dask's timeouts as the hosts have them.
    with dask.config.set(
        {k: v for k, v in hosts_support.HOSTS_DASK_CONFIG.items() if "profile" not in k}
    ):
        try:
            yield topo
        finally:
            topo.down()


@pytest.fixture
def topo(hosts: hosts_support.Topology) -> Iterator[hosts_support.Topology]:
    """The session's topology, whole again after the test: links up at their rate, the
    storage server running, every worker back on the scheduler."""
    yield hosts
    for name, mb in hosts.tmpfs_mb.items():
        hosts.resize_cache(name, f"{mb}m")
    for name in hosts.workers:
        hosts.heal(name)
        hosts.limit(name, out_mbit=hosts.worker_mbit, in_mbit=hosts.worker_mbit)
    for name in hosts.storage:
        if name not in hosts.storage_procs:
            hosts.start_storage(name)
    hosts.wait_ready()


@pytest.fixture(scope="session")
def workload(hosts: hosts_support.Topology, tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """The demo's dataset scaled down (24,000 events in 12 files) on the storage host, its
    overlapping jobs (six, a quarter second apart), and their single-host results."""
    local = tmp_path_factory.mktemp("hosts-data")
    catalog = write_demo_dataset(local / "data", n_events=N_EVENTS, n_files=N_FILES, seed=3)
    export = hosts.export_dir()
    for f in sorted(catalog.parent.glob("*.root")):
        shutil.copy(f, export / f.name)
        (export / f.name).chmod(0o644)
    local_jobs = demo_workload(catalog, local, n_jobs=N_JOBS)
    doc = yaml.safe_load(catalog.read_text())
    for f in doc["datasets"]["zmumu"]["files"]:
        f["url"] = f"{hosts.storage_url()}/{f['url']}"
    remote = local / "remote"
    remote.mkdir()
    (remote / "catalog.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    jobs_file = demo_workload(remote / "catalog.yaml", remote, n_jobs=N_JOBS)

    # The same jobs on one host: the embedded cluster, the files on local disk.
    doc = yaml.safe_load(local_jobs.read_text())
    for job in doc["jobs"]:
        job["output"] = str(local / "single" / f"{job['id']}.pkl")
    local_jobs.write_text(yaml.safe_dump(doc, sort_keys=False))
    specs = load_jobs(local_jobs)
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=local / "caches")
    # Dask's own timeouts, not the hosts' short ones: a local cluster started on a loaded
    # machine (several test processes at once) took longer than 5 s to connect, and its
    # workers' heartbeats came later than the hosts' 10 s TTL.
    local_timeouts = {
        "distributed.comm.timeouts.connect": "30s",
        "distributed.comm.timeouts.tcp": "30s",
        "distributed.scheduler.worker-ttl": "5 minutes",
    }
    with dask.config.set(local_timeouts):
        report = _single_host_run(specs, opts)
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    reference = {job: counts(result) for job, result in report.results.items()}
    return Workload(jobs_file, local_jobs, reference, N_EVENTS)


def _single_host_run(specs: list[JobSpec], opts: ClusterOptions) -> RunReport:
    return asyncio.run(
        run_jobs(
            specs, opts, policy="cache-splitting", config=FAST, packets=PACKETS,
            calibration=CALIBRATION,
        )
    )  # fmt: skip
