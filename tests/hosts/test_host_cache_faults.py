"""Cache faults across the test hosts, under every caching policy: a worker host whose cache
disk (a tmpfs of its own) is too small for any file, and cached copies damaged on the worker
hosts' disks between two runs. Each run ends with every job complete, every event counted
once and the results of a run on one host; the run's summary says what happened
(docs/runtime.md, "Faults").

The figures (packets read through, copies found damaged) are appended as JSON lines to the
file named by ``DATASCHED_HOSTS_FIGURES`` (docs/deployment.md quotes them)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from datasched.runtime.cachefaults import CORRUPTED_NOTE, READ_THROUGH_NOTE
from datasched.runtime.diskcache import cache_file_name, file_adler32
from datasched.runtime.worker import DISK_FULL_NOTE, node_cache_dir
from hosts.runs import (
    CACHING_POLICIES,
    SMALL_CACHE_HOST,
    Workload,
    check_exactly_once,
    run_on_hosts,
)
from hosts.test_host_faults import record
from hosts_support import Topology

pytestmark = pytest.mark.hosts

FULL_SIZE = "32k"
"""The small cache disk's size for a run: room for the cache's index, not for a file."""


def cached_copies(topo: Topology, worker: str) -> list[Path]:
    """The cached copies on ``worker``'s disk (its cache directory, index left out)."""
    directory = node_cache_dir(topo.cache_dir(worker), worker)
    return sorted(p for p in directory.iterdir() if p.name != "index.json")


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_full_cache_disk(policy: str, topo: Topology, workload: Workload, tmp_path: Path) -> None:
    """The small host's cache disk shrunk to 32 KiB once its cache is empty: every file it
    is given it reads where it lies, without caching, and keeps working; nothing half-written
    stays on its disk; the summary names the host and counts its packets read through."""
    specs = workload.specs(tmp_path / "out")
    host = SMALL_CACHE_HOST

    def shrink() -> None:
        topo.resize_cache(host, FULL_SIZE)

    report, engine = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path, before=shrink))
    check_exactly_once(report, specs, workload)
    assert engine.worker_departures == 0
    mine = [p for p in report.packets if p.node == host]
    assert mine, "the host with the full cache disk was given no packet"
    assert {p.source for p in mine} == {"direct"}, [(p.url, p.source) for p in mine]
    assert report.cache_faults["read_through"] == {
        host: {"packets": len(mine), "files": len({p.url for p in mine})}
    }
    assert any(n.startswith(f"node {host}: ") and READ_THROUGH_NOTE in n for n in report.notes)
    assert any(n.startswith(f"node {host}: {DISK_FULL_NOTE}") for n in report.notes)
    assert cached_copies(topo, host) == []  # nothing half-written
    # The other hosts cached as usual.
    assert any(p.source != "direct" for p in report.packets if p.node != host)
    record(
        fault="full cache disk",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        read_through_packets=len(mine),
        share=round(sum(p.n_events for p in mine) / sum(p.n_events for p in report.packets), 3),
    )


def flip_middle_byte(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("policy", CACHING_POLICIES)
def test_corrupted_cached_copies(
    policy: str, topo: Topology, workload: Workload, tmp_path: Path
) -> None:
    """A run fills the hosts' caches; then one byte of every cached copy on every worker
    host is flipped, on disk, where the worker keeps it; a second run of the same jobs with
    those caches finds the damage (size and adler32) before reading: the copies are dropped,
    fetched again and never processed; the results equal the single-host run's, and the
    summary counts the damaged copies per host."""
    first_specs = workload.specs(tmp_path / "first")
    first, _ = asyncio.run(run_on_hosts(topo, first_specs, policy, tmp_path))
    check_exactly_once(first, first_specs, workload)
    damaged: dict[str, dict[str, Path]] = {}
    by_name = {cache_file_name(p.url): p.url for p in first.packets}
    for worker in topo.workers:
        for path in cached_copies(topo, worker):
            if path.name in by_name:
                flip_middle_byte(path)
                damaged.setdefault(worker, {})[by_name[path.name]] = path
    assert damaged, "the first run left no cached copy"

    specs = workload.specs(tmp_path / "second")
    report, engine = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path, cold=False))
    check_exactly_once(report, specs, workload)
    assert engine.worker_departures == 0
    found = report.cache_faults["corrupted"]
    assert found, "no damaged copy was found"
    every_damaged = {url for copies in damaged.values() for url in copies}
    for worker, urls in found.items():
        # Found where it lay, or by a host that was sent it by a peer.
        assert set(urls) <= every_damaged, (worker, urls)
        assert any(n.startswith(f"node {worker}: ") and CORRUPTED_NOTE in n for n in report.notes)
    # A damaged copy a host read again is gone from its disk or whole again (fetched anew):
    # it was checked before its first use (copies no packet used stay as they are, unread).
    used = {(p.node, p.url) for p in report.packets if p.source != "direct"}
    checked = 0
    for worker, copies in damaged.items():
        for url, path in copies.items():
            if (worker, url) in used and path.exists():
                original = topo.export_dir() / url.rsplit("/", 1)[1]
                assert file_adler32(path) == file_adler32(original), (worker, url)
                checked += 1
    record(
        fault="corrupted cached copies",
        policy=policy,
        makespan_s=round(report.makespan_s, 2),
        baseline_s=round(first.makespan_s, 2),
        damaged=sum(len(c) for c in damaged.values()),
        found=sum(sum(c.values()) for c in found.values()),
        fetched_again_whole=checked,
    )
