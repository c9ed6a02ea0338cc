"""Node faults in the simulator, under every registered policy: nodes fail and come back
while jobs run; every event is processed exactly once and every job completes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import assert_each_event_once, scheduler, space
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Pipelining
from datasched.policies import available
from datasched.sim.engine import SimEngine
from datasched.sim.experiment import ConfigError, SimConfig, simulate
from datasched.sim.faults import NodeFaults
from strategies import job_lists

POLICIES = sorted(available())
SMALL: dict[str, dict[str, Any]] = {
    "delayed": {"period_h": 0.05, "stripe_events": 50},
    "basic-packetizer": {"max_workers_per_node": 1},
    "adaptive-packetizer": {"priorities": "default=1", "calibration_events": 5},
}
PEER_READS: dict[str, dict[str, Any]] = {"out-of-order": {"replication": True}}
"""Parameters that turn peer reads on (whole-file fetches then shared between nodes)."""
LONG_RUN: dict[str, dict[str, Any]] = {
    "delayed": {"period_h": 6.0},
    # Pull policies make a packet every few seconds of a job: longer ones keep the run short
    # (the same rules fire; a 40,000-event job is still tens of packets).
    "basic-packetizer": {"fraction": 1},
    "adaptive-packetizer": {"min_packet_s": 600.0, "max_packet_s": 1200.0},
}


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25, deadline=None)
@given(
    jobs=job_lists(max_jobs=10),
    nodes=st.integers(1, 4),
    slots=st.sampled_from([1, 2]),
    cache_events=st.sampled_from([0, 150, 1000]),
    file_events=st.sampled_from([0, 25]),
    mtbf_s=st.sampled_from([60.0, 300.0, 3000.0]),
    seed=st.integers(0, 3),
    hot=st.sampled_from([None, 1]),
    pipelining=st.sampled_from([Pipelining.NONE, Pipelining.TERTIARY]),
    peer_reads=st.booleans(),
)
def test_every_event_once_and_every_job_completes_despite_faults(
    policy: str,
    jobs: list[Job],
    nodes: int,
    slots: int,
    cache_events: int,
    file_events: int,
    mtbf_s: float,
    seed: int,
    hot: int | None,
    pipelining: Pipelining,
    peer_reads: bool,
) -> None:
    """... with hot-file replication on beside the policy in half the examples: copies in
    flight to or from a failing node must not strand or duplicate work; with tertiary
    pipelining and, where the policy has them, peer reads (fetches in flight waited for,
    taken over when their node fails) in half."""
    sched = scheduler(
        policy,
        nodes,
        cache_events,
        min_subjob=3,
        slots=slots,
        data=space(file_events),
        params=PEER_READS.get(policy) if peer_reads else SMALL.get(policy),
        hot=hot,
        pipelining=pipelining,
    )
    faults = NodeFaults(mtbf_h=mtbf_s / 3600, repair_h=30.0 / 3600, seed=seed)
    engine = SimEngine(sched, check_conservation=True, faults=faults)
    run = engine.run(jobs)
    assert_each_event_once(run.processed, jobs)
    assert run.jobs_completed == len(jobs)
    assert not sched.jobs
    assert run.events_processed == run.events_submitted


def test_faults_happen_and_cost_time_but_lose_nothing() -> None:
    base = SimConfig(policy="out-of-order", n_jobs=200, load_jobs_per_h=0.5, slots=2)
    steady, _ = simulate(base)
    faulty, run = simulate(SimConfig(**{**base.__dict__, "node_mtbf_h": 100.0}))
    assert faulty.node_failures > 0
    assert run.node_failures == faulty.node_failures
    assert faulty.jobs_completed == 200
    assert faulty.events_processed == faulty.events_submitted
    assert steady.node_failures == 0
    # Lost caches and redone work: slower on average, never faster by much.
    assert faulty.mean_processing_s > 0.9 * steady.mean_processing_s


def test_bad_fault_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="node_mtbf_h"):
        SimConfig(node_mtbf_h=-1.0)
    with pytest.raises(ConfigError, match="node_repair_h"):
        SimConfig(node_mtbf_h=10.0, node_repair_h=-2.0)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_long_run_with_slots_files_and_faults_completes(policy: str) -> None:
    """Hundreds of jobs on two-slot nodes over whole files, nodes failing every few days:
    long enough for the rare paths (work displaced back to the queue of an idle node, splits
    whose target fails) that small scenarios seldom reach."""
    config = SimConfig(
        policy=policy,
        policy_params=LONG_RUN.get(policy, {}),
        n_jobs=300,
        slots=2,
        file_gb=5.0,
        node_mtbf_h=200.0,
        max_backlog=10**6,
    )
    # Validated: the rare paths are where broken books would show (docs/design.md).
    summary, run = simulate(config, check_conservation=True, validate=True)
    assert summary.node_failures > 0
    assert run.jobs_completed == 300
    assert run.events_processed == run.events_submitted
    assert run.processed is not None
    for job_id, pieces in run.processed.items():
        union = IntervalSet()
        for piece in pieces:
            assert not (piece & union), f"job {job_id}: events processed twice"
            union = union | piece
