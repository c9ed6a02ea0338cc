"""The runtime builds its policies the way the simulator does: by name, from their declared
parameters, with their own data. Adaptive delay gets the performance map it gets in
``datasched sim`` and, at a high measured load, delays jobs on real workers too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from datasched.core.packets import PacketSizing
from datasched.policies.ponce.adaptive import AdaptiveDelay, default_map
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import load_jobs
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import (
    ClusterOptions,
    build_scheduler,
    default_calibration,
    job_space,
    open_cluster,
)

HOURS_A_SECOND = 100.0
"""The master's time runs 100 hours a second: the map's periods (hours to a week) pass in
seconds. Arrivals and wake-ups follow this time; packets run at their own pace."""


def test_adaptive_delay_has_the_simulators_map_and_delays_at_high_load(
    demo_catalog: Path, tmp_path: Path
) -> None:
    # Thirty small jobs within three (simulated) hours: a load of 2.5 jobs/h over the
    # policy's 12-hour minimum window, above what the shipped map sustains without delay
    # (1.5 jobs/h at 50 GB caches, stripe 5000), so it chooses a period of days.
    jobs = [
        {
            "id": f"j{i}",
            "dataset": "zmumu",
            "events": [100 * i, 100 * i + 100],
            "submit_s": 360.0 * i,
            "output": str(tmp_path / "out" / f"j{i}.pkl"),
        }
        for i in range(30)
    ]
    # And one more a day later: the jobs file's last arrival closes arrivals (the policy
    # then releases what it holds), so the load of the first thirty is judged while more
    # may still come, as on a cluster that serves a stream of jobs.
    jobs.append(
        {
            **jobs[-1],
            "id": "late",
            "submit_s": 30 * 3600.0,
            "output": str(tmp_path / "out" / "late.pkl"),
        }
    )
    doc = {
        "catalog": str(demo_catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
        "jobs": jobs,
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    specs = load_jobs(tmp_path / "jobs.yaml")
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=tmp_path / "caches")

    async def main() -> tuple[RuntimeEngine, int]:
        space = job_space(specs)
        # The demo processor's cost on this kind of machine (a fixed figure: no timing here).
        calibration = default_calibration(None, 1e-5)
        async with open_cluster(opts) as (client, names):
            packets = PacketSizing(target_s=0.2, min_events=100)
            sched = build_scheduler(
                len(names), opts, space, calibration, policy="adaptive-delay", packets=packets
            )
            engine = RuntimeEngine(
                client,
                sched,
                names,
                config=EngineConfig(queue_s=0.2, poll_s=0.05),
                time_scale=3600 * HOURS_A_SECOND,
            )
            report = await engine.run(specs, known_cache={})
            done = sum(j.status == "completed" for j in report.jobs)
            return engine, done

    engine, done = asyncio.run(main())
    policy = engine.scheduler.policy
    assert isinstance(policy, AdaptiveDelay)
    assert policy.performance_map == default_map()  # the map `datasched sim` uses
    assert done == 31
    periods = [period for _, period in policy.periods_h]
    assert periods[0] == 0.0  # the first arrival saw no load: no delay
    assert max(periods) > 24.0  # later ones, a high load: jobs held for days
