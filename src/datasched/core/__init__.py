"""The scheduling core: pure model and scheduler state, no I/O, no clock, no engine imports."""

from __future__ import annotations

from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, CostModel, Job, Node, Pipelining, Source, Subjob
from datasched.core.scheduler import JobState, Policy, Running, Scheduler, SchedulerError

__all__ = [
    "ClusterSpec",
    "CostModel",
    "IntervalSet",
    "Job",
    "JobState",
    "Node",
    "Pipelining",
    "Policy",
    "Running",
    "Scheduler",
    "SchedulerError",
    "Source",
    "Subjob",
]
