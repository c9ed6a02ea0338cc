"""PROOF's uneven-data experiment across the test hosts (docs/proof.md, "The uneven job on the
test hosts"): two file servers on storage hosts of their own behind 0.8 Mbit/s links, the
four worker hosts processing, the basic and the adaptive packetizer on the same placement.
What must hold: every event processed exactly once under both, the same histogram, the file
servers read over their links, and adaptive / basic computed and recorded (its value is
measured, not asserted: timings on a shared machine are not a test's business)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import dask.config
import pytest

import hosts_support
from hosts.proof_runs import Experiment, HostsUneven, proof_hosts, run_experiment

pytestmark = pytest.mark.hosts


@pytest.fixture(scope="module")
def proof_topo() -> Iterator[hosts_support.Topology]:
    problem = hosts_support.missing_tools()
    if problem is not None:
        if os.environ.get("DATASCHED_REQUIRE_HOSTS") == "1":
            pytest.fail(f"the hosts tests are required (DATASCHED_REQUIRE_HOSTS=1): {problem}")
        pytest.skip(problem)
    config = {k: v for k, v in hosts_support.HOSTS_DASK_CONFIG.items() if "profile" not in k}
    with dask.config.set(config), proof_hosts(2) as topo:
        yield topo


def test_packetizers_on_file_servers_of_their_own(
    proof_topo: hosts_support.Topology,
    tmp_path: Path,
    record_testsuite_property: Callable[[str, object], None],
) -> None:
    setup = HostsUneven()
    exp: Experiment = run_experiment(proof_topo, setup, tmp_path / "runs", repeats=1)
    n_events = setup.files * setup.file_events
    servers = set(proof_topo.storage)
    placement = setup.placement()
    assert {placement.count(s) for s in servers} != {0}  # the servers hold files
    reference = exp.basic[0].counts
    assert sum(reference) > 0
    for done in (*exp.basic, *exp.adaptive):
        assert done.covered == n_events  # each event once (overlaps are refused in the run)
        assert sum(p.n_events for p in done.run.packets) == n_events
        assert done.counts == reference
        assert {p.node for p in done.run.packets} <= set(proof_topo.workers)
        peer = [p for p in done.run.packets if p.source == "peer"]
        assert peer
        assert all(p.bytes_from_peer > 0 for p in peer)
    # Fewer, larger packets under the adaptive packetizer (a file's share, not a twentieth).
    assert len(exp.adaptive[0].run.packets) < len(exp.basic[0].run.packets)
    summary = exp.summary()
    assert summary["adaptive_over_basic"] == pytest.approx(exp.ratio, abs=1e-3)
    assert exp.ratio > 0
    assert summary["server_reads_by_readers"]  # the servers' reads were measured
    # Recorded: in the JUnit XML (``--junitxml``: the suite's properties) and beside the
    # test's files.
    record_testsuite_property("proof_hosts_adaptive_over_basic", round(exp.ratio, 3))
    record_testsuite_property("proof_hosts", json.dumps(summary))
    (tmp_path / "proof_hosts.json").write_text(json.dumps(summary))
