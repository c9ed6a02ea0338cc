"""Existing clusters, as a user starts them: a real ``dask scheduler`` and ``dask worker``
processes. Peer reads go through Dask's comms between workers whose caches share no path;
and every run's settings (cache directory, size, processor code) take effect on a cluster
that served an earlier run."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from distributed import Client

from datasched.core.packets import PacketSizing
from datasched.runtime.datamoves import FileToMove, move_files
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import ClusterOptions, run_jobs
from datasched.runtime.worker import node_cache_dir
from runtime_support import N_EVENTS, DaskProcesses, reference_counts

FAST = EngineConfig(queue_s=0.2, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.2, min_events=500)


SLOW_PROCESSOR = """
import time

from datasched.runtime.demodata import DimuonMass


class Slow(DimuonMass):
    def process(self, events):
        time.sleep(0.05)
        return super().process(events)
"""


def write_jobs(tmp_path: Path, catalog: Path, processor: str, n_jobs: int = 1) -> list[JobSpec]:
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": processor, "dataset": "zmumu"},
        "jobs": [{"id": "j" if i == 0 else f"j{i}"} for i in range(n_jobs)],
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    return load_jobs(tmp_path / "jobs.yaml")


@pytest.fixture
def private_caches(tmp_path: Path) -> Iterator[tuple[DaskProcesses, dict[str, Path]]]:
    """Two workers, each with a cache directory of its own (DATASCHED_CACHE_DIR), under
    roots that share nothing: what two machines with node-local scratch look like."""
    roots = {name: tmp_path / f"scratch-{name}" for name in ("n1", "n2")}
    cluster = DaskProcesses({n: {"DATASCHED_CACHE_DIR": str(r)} for n, r in roots.items()})
    try:
        yield cluster, roots
    finally:
        cluster.close()


def test_peer_reads_go_through_dask_between_private_caches(
    demo_catalog: Path, tmp_path: Path, private_caches: tuple[DaskProcesses, dict[str, Path]]
) -> None:
    cluster, roots = private_caches
    # Two jobs over data that n1 caches whole and n2 not at all, and a short one over other
    # files, which n2 takes at once (n1 has its cached work). When n2 is done with it,
    # out-of-order with replication lets it take a share of n1's work: read from n1's cache.
    # n1's packets wait a little (not on the CPU, so a fast machine does not finish them
    # before n2 is free), so the share n2 takes is there to take.
    for f in sorted(demo_catalog.parent.glob("part-00[01].root")):
        shutil.copy(f, tmp_path / f"other-{f.name}")
    (tmp_path / "slow.py").write_text(SLOW_PROCESSOR)
    specs = write_jobs(tmp_path, demo_catalog, str(tmp_path / "slow.py") + ":Slow", 2)
    doc = yaml.safe_load((tmp_path / "jobs.yaml").read_text())
    doc["jobs"].append({"id": "x", "files": ["other-*.root"], "tree": "Events"})
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    specs = load_jobs(tmp_path / "jobs.yaml")
    files = specs[0].dataset.files
    with Client(cluster.address) as client:  # type: ignore[no-untyped-call]  # distributed is not annotated
        addrs = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
    master_root = tmp_path / "the-masters-cache-dir"  # overridden on both workers
    opts = ClusterOptions(
        workers=2,
        cache_bytes=50 * 10**6,
        cache_root=master_root,
        scheduler_address=cluster.address,
    )

    async def main() -> Any:
        from datasched.runtime.session import open_cluster

        async with open_cluster(opts) as (client, _):
            moved = await client.submit(
                move_files,
                [FileToMove(f.url, f.n_bytes) for f in files],
                workers=[addrs["n1"]],
                pure=False,
            )
            assert sorted(moved.cached) == sorted(f.url for f in files)
        return await run_jobs(
            specs,
            opts,
            policy="out-of-order",
            policy_params={"replication": True},
            config=FAST,
            packets=PACKETS,
            calibrate=False,
        )

    report = asyncio.run(main())
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    peer = [p for p in report.packets if p.source == "peer"]
    # (On failure, the shared jobs' packets: whether n2 took none of them, or read them from
    # elsewhere than n1's cache.)
    assert peer, [
        (p.job, p.node, p.source, p.bytes_from_peer) for p in report.packets if p.job != "x"
    ]
    assert all(p.node == "n2" and p.bytes_from_peer > 0 for p in peer)
    cached = [p for p in report.packets if p.job != "x"]
    assert sum(p.bytes_from_tertiary for p in cached) == 0  # nothing from storage
    for name in ("j", "j1"):
        counts = [float(x) for x in report.results[name]["mass"].values()]
        assert counts == reference_counts(demo_catalog, 0, N_EVENTS)
    # The copies came over the network: no worker ever looked under the master's path or
    # the other's root.
    assert not master_root.exists()
    assert not (roots["n1"] / "n2").exists()
    assert not (roots["n2"] / "n1").exists()


PROCESSOR = """\
from datasched.runtime.demodata import DimuonMass


class Tagged(DimuonMass):
    def process(self, events):
        out = super().process(events)
        out["version"] = {VERSION}
        return out
"""


def test_each_run_on_an_existing_cluster_gets_its_own_settings(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """Two runs on one running cluster, with different cache directories and sizes and an
    edited processor: the second run's settings and code take effect."""
    cluster = DaskProcesses({"n1": {}, "n2": {}})
    try:
        analysis = tmp_path / "analysis.py"
        first_root, second_root = tmp_path / "cache-a", tmp_path / "cache-b"
        biggest = max(f.n_bytes for f in load_catalog_files(demo_catalog))

        def run(root: Path, capacity: int, version: int) -> Any:
            analysis.write_text(PROCESSOR.replace("{VERSION}", f"{{{version}}}"))
            specs = write_jobs(tmp_path, demo_catalog, "analysis.py:Tagged")
            opts = ClusterOptions(
                workers=2,
                cache_bytes=capacity,
                cache_root=root,
                scheduler_address=cluster.address,
            )
            return asyncio.run(
                run_jobs(specs, opts, policy="cache-splitting", config=FAST, packets=PACKETS)
            )

        first = run(first_root, 50 * 10**6, 1)
        assert first.results["j"]["version"] == {1}
        cached_first = {p.name for p in first_root.rglob("*.root")}
        assert len(cached_first) == 6  # everything fits
        second = run(second_root, biggest, 2)
        assert second.results["j"]["version"] == {2}  # the edited processor
        assert second.jobs[0].status == "completed"
        assert {p.name for p in first_root.rglob("*.root")} == cached_first  # left alone
        for name in ("n1", "n2"):
            held = list(node_cache_dir(second_root, name).glob("*.root"))
            assert sum(p.stat().st_size for p in held) <= biggest  # the new size holds
        assert any(node_cache_dir(second_root, n).exists() for n in ("n1", "n2"))
    finally:
        cluster.close()


def load_catalog_files(catalog: Path) -> list[Any]:
    from datasched.runtime.dataset import load_catalog

    return list(load_catalog(catalog)["zmumu"].files)


def test_our_own_workers_run_without_the_profiler_and_a_given_clusters_keep_theirs(
    tmp_path: Path,
) -> None:
    """The workers datasched starts have no dashboard, so no statistical profiler, and the
    master fetches results straight from them; a cluster the user gives keeps its settings."""
    import dask.config

    from datasched.runtime.session import open_cluster

    async def settings(opts: ClusterOptions) -> tuple[list[bool], bool]:
        async with open_cluster(opts) as (client, _):
            ran = await client.run(dask.config.get, "distributed.worker.profile.enabled")
            return [bool(v) for v in ran.values()], bool(client.direct_to_workers)

    own = asyncio.run(settings(ClusterOptions(workers=2, cache_root=tmp_path / "own")))
    assert own == ([False, False], True)
    given = DaskProcesses({"n1": {}})
    try:
        opts = ClusterOptions(
            workers=1, cache_root=tmp_path / "given", scheduler_address=given.address
        )
        assert asyncio.run(settings(opts)) == ([True], False)
    finally:
        given.close()
