"""The scheduling core: pure model and scheduler state, no I/O, no clock, no engine imports."""

from __future__ import annotations

from datasched.core.data import CacheGrain, DataFile, Dataset, DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.core.model import (
    CostModel,
    Job,
    Link,
    Node,
    Pipelining,
    Site,
    Source,
    Subjob,
    Topology,
)
from datasched.core.policy import Param, Policy, ReadMode, Returned, SchedulerView
from datasched.core.scheduler import Scheduler, SchedulerError
from datasched.core.state import JobState, Running

__all__ = [
    "CacheGrain",
    "CostModel",
    "DataFile",
    "DataSpace",
    "Dataset",
    "FileSpec",
    "IntervalSet",
    "Job",
    "JobState",
    "Link",
    "Node",
    "Param",
    "Pipelining",
    "Policy",
    "ReadMode",
    "Returned",
    "Running",
    "Scheduler",
    "SchedulerError",
    "SchedulerView",
    "Site",
    "Source",
    "Subjob",
    "Topology",
]
