"""Real runs across the test hosts: the client here, the scheduler on a host of its own, four
worker hosts whose caches share no path, tertiary storage over ``root://`` on the storage
host. Under every registered policy: every event once, the results of a run on one host, and
peer reads between hosts (over Dask) where the policy makes them. And a coffea NanoAOD job."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hosts.runs import (
    CACHING_POLICIES,
    POLICIES,
    Workload,
    check_exactly_once,
    reads_peers,
    run_on_hosts,
)
from hosts_support import Topology

pytestmark = pytest.mark.hosts

DATA = Path(__file__).resolve().parent.parent / "data"
NANO = DATA / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
ANALYSIS = Path(__file__).resolve().parent.parent / "runtime" / "coffea_analysis.py"


def caches(policy: str) -> bool:
    return policy in CACHING_POLICIES


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_across_hosts(
    policy: str,
    topo: Topology,
    workload: Workload,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    specs = workload.specs(tmp_path / "out")
    prefill = None
    if reads_peers(policy) and not caches(policy):
        # Half the files cached on w1 alone: the other hosts read them from w1 (a policy
        # that reads data where it lies but keeps nothing finds no other copies).
        files = specs[0].dataset.files
        prefill = [("w1", f.url, f.n_bytes) for f in files[: len(files) // 2]]
    report, engine = asyncio.run(run_on_hosts(topo, specs, policy, tmp_path, prefill=prefill))
    check_exactly_once(report, specs, workload)
    assert engine.worker_departures == 0
    assert {p.node for p in report.packets} <= set(topo.workers)
    assert all(p.url.startswith("root://") for p in report.packets)
    peer = [p for p in report.packets if p.source == "peer"]
    record_property("peer_packets", len(peer))
    assert all(p.bytes_from_peer > 0 for p in peer)
    if not reads_peers(policy):
        assert not peer
    elif prefill is not None:
        # Certain here: half the data lies on w1 alone, and the policy keeps no copies.
        assert peer, Counter((p.node, p.source) for p in report.packets)
    # A caching policy that reads peers (out-of-order with replication) does so only when a
    # host that lacks a file gets work on it while another holds it: with cold caches that
    # depends on which fetch ends first, so its count is recorded, not required (the
    # packetizers' runs above show the reads between hosts for certain).


def test_coffea_nanoaod_job_across_hosts(topo: Topology, tmp_path: Path) -> None:
    """A coffea processor over NanoAOD on the storage host: the histograms equal coffea's own
    Runner over the same files read locally."""
    pytest.importorskip("coffea", reason="the coffea extra is not installed")
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from runtime import coffea_analysis

    local: dict[str, Any] = {}
    remote: dict[str, Any] = {}
    for ds in ("ttbar_a", "ttbar_b"):
        paths = []
        for i in range(2):
            name = f"hosts_{ds}_{i}.root"
            shutil.copy(NANO, tmp_path / name)
            shutil.copy(NANO, topo.export_dir() / name)
            (topo.export_dir() / name).chmod(0o644)
            paths.append(name)
        local[ds] = {"files": {str(tmp_path / p): "Events" for p in paths}}
        remote[ds] = {"files": {f"{topo.storage_url()}/{p}": "Events" for p in paths}}
    run = processor.Runner(
        executor=processor.IterativeExecutor(), schema=NanoAODSchema, chunksize=150
    )
    ref = run(local, processor_instance=coffea_analysis.MuonAnalysis(min_pt=4.0))
    doc = {
        "jobs": [
            {
                "id": "muons",
                "fileset": remote,
                "processor": f"{ANALYSIS}:MuonAnalysis",
                "processor_args": {"min_pt": 4.0},
                "schema": "nanoaod",
                "output": str(tmp_path / "out" / "muons.coffea"),
            }
        ]
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    from datasched.runtime.jobspec import load_jobs

    specs = load_jobs(tmp_path / "jobs.yaml")
    report, _ = asyncio.run(run_on_hosts(topo, specs, "out-of-order", tmp_path))
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    assert len({p.node for p in report.packets}) > 1  # spread over hosts
    got = report.results["muons"]
    for key in ("pt", "mass"):
        assert list(got[key].axes[0]) == list(ref[key].axes[0])
        assert got[key].values().tolist() == ref[key].values().tolist(), key
    assert dict(got["cutflow"]) == dict(ref["cutflow"])
