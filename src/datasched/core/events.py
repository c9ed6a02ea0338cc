"""What happens to the scheduler: the inputs of :meth:`Scheduler.handle`.

Each event carries its own timestamp (seconds); the core has no clock. Engines (the simulator,
the runtime) turn the world into these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job

__all__ = [
    "CacheChanged",
    "Event",
    "JobArrived",
    "NodeLost",
    "SubjobFinished",
    "SubjobShrunk",
    "SubjobStopped",
    "Tick",
]

_EMPTY = IntervalSet()


@dataclass(frozen=True, slots=True)
class JobArrived:
    """A job was submitted."""

    time: float
    job: Job


@dataclass(frozen=True, slots=True)
class SubjobFinished:
    """A subjob processed all of its events on ``node``.

    ``cache_added`` and ``cache_evicted`` report what the node's cache gained and lost while it
    ran, so the master's cache directory stays true.
    """

    time: float
    subjob_id: int
    node: int
    cache_added: IntervalSet = field(default=_EMPTY)
    cache_evicted: IntervalSet = field(default=_EMPTY)


@dataclass(frozen=True, slots=True)
class SubjobStopped:
    """A subjob stopped before its end, in answer to a Preempt or because its node failed.

    ``remaining`` is what it had not processed; everything else of its data was processed.
    """

    time: float
    subjob_id: int
    node: int
    remaining: IntervalSet
    cache_added: IntervalSet = field(default=_EMPTY)
    cache_evicted: IntervalSet = field(default=_EMPTY)


@dataclass(frozen=True, slots=True)
class SubjobShrunk:
    """The answer to a Shrink: ``released`` (part of what was asked, possibly less, possibly
    nothing) was taken from the subjob, which goes on with the rest of its data."""

    time: float
    subjob_id: int
    node: int
    released: IntervalSet


@dataclass(frozen=True, slots=True)
class CacheChanged:
    """A node's cache changed outside any subjob (a worker restart, an operator's purge)."""

    time: float
    node: int
    added: IntervalSet = field(default=_EMPTY)
    evicted: IntervalSet = field(default=_EMPTY)


@dataclass(frozen=True, slots=True)
class NodeLost:
    """A node is gone. ``remaining`` is what its running subjob had not processed (None: the
    engine cannot tell, so the whole subjob is done again); the rest counts as processed."""

    time: float
    node: int
    remaining: IntervalSet | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: the answer to a WakeAt action (period ends, fairness deadlines)."""

    time: float


Event = JobArrived | SubjobFinished | SubjobStopped | SubjobShrunk | CacheChanged | NodeLost | Tick
