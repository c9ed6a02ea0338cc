"""The simulator's prediction of a run on the cluster: the same jobs, data space, cluster,
calibrated costs and policy, in the simulated engine, with empty caches."""

from __future__ import annotations

from typing import Any

from datasched.core.model import Job
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.session import Calibration, ClusterOptions, build_scheduler, job_space
from datasched.runtime.space import job_events
from datasched.sim.engine import SimEngine

__all__ = ["predict_makespan"]


def predict_makespan(
    specs: list[JobSpec],
    opts: ClusterOptions,
    calibration: Calibration,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
) -> float:
    """The makespan (seconds) the simulator predicts for ``specs`` on ``opts.workers``
    workers under ``policy``: the scheduler the runtime would build, driven by the
    simulated engine."""
    space = job_space(specs)
    jobs = [
        Job(i, s.submit_s, job_events(space, s.dataset, s.start, s.stop))
        for i, s in enumerate(specs)
    ]
    sched = build_scheduler(
        opts.workers, opts, space, calibration, policy=policy, policy_params=policy_params
    )
    run = SimEngine(sched).run(jobs)
    return max((r.end_s for r in run.jobs), default=0.0)
