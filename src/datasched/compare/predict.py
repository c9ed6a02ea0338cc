"""The simulator's prediction of a run on the cluster: the same jobs, data space, cluster,
calibrated costs and policy, in the simulated engine, with empty caches."""

from __future__ import annotations

from typing import Any

from datasched.core.model import Job
from datasched.core.packets import PacketSizing
from datasched.core.scheduler import Scheduler
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import Calibration, ClusterOptions, build_scheduler, job_space
from datasched.runtime.space import job_events
from datasched.sim.engine import SimEngine, SimRun

__all__ = ["predict_makespan", "run_makespan", "simulate_run"]


def simulate_run(
    specs: list[JobSpec],
    opts: ClusterOptions,
    calibration: Calibration,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
    packets: PacketSizing | None = None,
    config: EngineConfig | None = None,
) -> tuple[Scheduler, SimRun]:
    """``specs`` on ``opts.workers`` workers under ``policy``, simulated: the scheduler the
    runtime would build (``packets``: its default packetizer), driven by the simulated
    engine, which cuts packets as the runtime with ``config`` would (its packets in flight;
    None: its defaults); the scheduler (its replicator's counts) and the simulated run."""
    space = job_space(specs)
    jobs = [
        Job(i, s.submit_s, job_events(space, s.dataset, s.start, s.stop))
        for i, s in enumerate(specs)
    ]
    sched = build_scheduler(
        opts.workers,
        opts,
        space,
        calibration,
        policy=policy,
        policy_params=policy_params,
        packets=packets,
    )
    # The runtime closes arrivals after a jobs file's last job (delayed scheduling's period
    # then ends): so does its prediction.
    depth = None if config is None else config.packet_depth
    return sched, SimEngine(sched, in_flight=depth).run(jobs, close_arrivals=True)


def predict_makespan(
    specs: list[JobSpec],
    opts: ClusterOptions,
    calibration: Calibration,
    *,
    policy: str,
    policy_params: dict[str, Any] | None = None,
    packets: PacketSizing | None = None,
    config: EngineConfig | None = None,
) -> float:
    """The makespan (seconds) the simulator predicts for ``specs`` on ``opts.workers``
    workers under ``policy``, its packets cut as the run's (``packets``: its default
    packetizer; ``config``: its packets in flight; each packet pays the calibration's cost
    per packet)."""
    _, run = simulate_run(
        specs,
        opts,
        calibration,
        policy=policy,
        policy_params=policy_params,
        packets=packets,
        config=config,
    )
    return run_makespan(run)


def run_makespan(run: SimRun) -> float:
    """When a simulated run's last job ended (seconds; 0: no job)."""
    return max((r.end_s for r in run.jobs), default=0.0)
