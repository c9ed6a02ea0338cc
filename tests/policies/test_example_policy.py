"""The example of docs/writing-a-policy.md is real code: it passes the checks every
registered policy passes (every event once, every job completes, node faults included),
and its declaration drives the same machinery as the built-in policies'."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import EVENT_BYTES, space
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import registry
from datasched.sim.engine import SimEngine
from datasched.sim.faults import NodeFaults
from script_support import load_script
from strategies import job_lists

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "most_cached.py"


def example() -> ModuleType:
    return load_script(EXAMPLE, "most_cached")


@settings(max_examples=40, deadline=None)
@given(jobs=job_lists(), nodes=st.integers(1, 4), slots=st.sampled_from([1, 2]))
def test_the_example_keeps_every_invariant(jobs: list[Job], nodes: int, slots: int) -> None:
    policy = example().MostCached()
    sched = Scheduler(
        Topology.uniform(nodes, 300 * EVENT_BYTES, slots=slots),
        space(),
        policy,
        min_subjob_events=3,
    )
    faults = NodeFaults(mtbf_h=0.05, repair_h=0.01, seed=1)
    run = SimEngine(sched, check_conservation=True, faults=faults).run(jobs)
    assert run.processed is not None
    for job in jobs:
        union = IntervalSet()
        for piece in run.processed[job.job_id]:
            assert not (piece & union)
            union = union | piece
        assert union == job.data
    assert run.jobs_completed == len(jobs)


def test_the_example_registers_and_builds_from_its_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cls = example().MostCached
    monkeypatch.setattr(registry, "_registry", dict(registry.available()))
    registry.register(cls)
    policy = registry.build_policy_from_text("most-cached", {"cache_fill": "false"})
    assert isinstance(policy, cls)
    assert not policy.reads.cache_fill
    assert registry.describe("most-cached")["params"][0]["name"] == "cache_fill"
