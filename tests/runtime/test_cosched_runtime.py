"""romosan's co-scheduling on real Dask workers: a job of this model is a multi-file job; its
files are fetched (a data-move task on the chosen worker) and pinned there before its packets
run, so every packet reads its file from that worker's disk cache."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from datasched.core.actions import Action, Fetch, Pin, Replicate, Start
from datasched.core.events import Event
from datasched.core.packets import PacketSizing
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
from runtime_support import reference_counts

FAST = EngineConfig(queue_s=0.2, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.2, min_events=300)


def write_jobs(tmp_path: Path, catalog: Path, jobs: list[dict[str, Any]]) -> list[JobSpec]:
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
        "jobs": [{"output": str(tmp_path / "out" / f"{j['id']}.pkl"), **j} for j in jobs],
    }
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_jobs(path)


async def run(
    specs: list[JobSpec], tmp_path: Path, policy: str
) -> tuple[RunReport, list[tuple[Event, list[Action]]], RuntimeEngine]:
    opts = ClusterOptions(workers=2, slots=1, cache_bytes=50 * 10**6, cache_root=tmp_path / "c")
    space = job_space(specs)
    # The demo processor's cost on this kind of machine (a fixed figure: no timing here).
    calibration = default_calibration(None, 1e-5)
    async with open_cluster(opts) as (client, names):
        sched = build_scheduler(
            len(names), opts, space, calibration, policy=policy, packets=PACKETS
        )
        seen: list[tuple[Event, list[Action]]] = []
        handle = sched.handle

        def traced(event: Event) -> list[Action]:
            actions = handle(event)
            seen.append((event, actions))
            return actions

        sched.handle = traced  # type: ignore[method-assign]  # wrapped: the test watches each event
        engine = RuntimeEngine(client, sched, names, config=FAST)
        report = await engine.run(specs, known_cache={})
    return report, seen, engine


@pytest.mark.parametrize("policy", ["fifo-roundrobin", "sjf-data", "mincostflow"])
def test_files_are_fetched_and_pinned_before_the_packets_run(
    policy: str, demo_catalog: Path, tmp_path: Path
) -> None:
    specs = write_jobs(
        tmp_path,
        demo_catalog,
        [
            {"id": "a", "dataset": "zmumu", "events": [0, 6000]},
            {"id": "b", "dataset": "zmumu", "events": [4000, 10000]},
            {"id": "c", "dataset": "zmumu", "events": [0, 2000], "submit_s": 0.3},
        ],
    )
    report, seen, engine = asyncio.run(run(specs, tmp_path, policy))
    space = engine.space
    pinned: dict[int, set[int]] = {}
    starts = 0
    for _, actions in seen:
        for a in actions:
            if isinstance(a, Pin):
                pinned.setdefault(a.node, set()).update(space.files_in(a.data))
            elif isinstance(a, Start):
                node = engine.scheduler.node_of(a.slot)
                wanted = set(space.files_in(a.subjob.data))
                assert wanted <= pinned.get(node, set()), "a job started before its files"
                assert a.cache_fill
                starts += 1
    assert starts == 3
    moves = [a for _, actions in seen for a in actions if isinstance(a, Fetch | Replicate)]
    assert moves, "the files were moved by data-move tasks"
    for spec, job in zip(specs, report.jobs, strict=True):
        assert job.status == "completed", job.error
        assert job.events_processed == spec.stop - spec.start
        counts = [float(x) for x in report.results[spec.id]["mass"].values()]
        assert counts == reference_counts(demo_catalog, spec.start, spec.stop)
    # Every packet read its file from the worker's cache: the moves had brought it there.
    assert report.packets
    assert all(p.source == "cache" for p in report.packets)
    assert all(p.bytes_from_tertiary == 0 for p in report.packets)
