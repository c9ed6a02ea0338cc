"""What happens to the scheduler: the inputs of :meth:`Scheduler.handle`.

Each event carries its own timestamp (seconds); the core has no clock. Engines (the simulator,
the runtime) turn the world into these.

Events, actions and subjobs are immutable named tuples rather than frozen dataclasses: a
simulated job makes about a hundred of them, and a frozen dataclass costs three times as much
to build (its ``__init__`` goes through ``object.__setattr__`` field by field), which was 4 %
of the instructions of an out-of-order simulation.
"""

from __future__ import annotations

from typing import NamedTuple

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


class JobArrived(NamedTuple):
    """A job was submitted."""

    time: float
    job: Job


class SubjobFinished(NamedTuple):
    """A subjob processed all of its events on ``node``.

    ``cache_added`` and ``cache_evicted`` report what the node's cache gained and lost while it
    ran, so the master's cache directory stays true.
    """

    time: float
    subjob_id: int
    node: int
    cache_added: IntervalSet = _EMPTY
    cache_evicted: IntervalSet = _EMPTY


class SubjobStopped(NamedTuple):
    """A subjob stopped before its end, in answer to a Preempt or because its node failed.

    ``remaining`` is what it had not processed; everything else of its data was processed.
    """

    time: float
    subjob_id: int
    node: int
    remaining: IntervalSet
    cache_added: IntervalSet = _EMPTY
    cache_evicted: IntervalSet = _EMPTY


class SubjobShrunk(NamedTuple):
    """The answer to a Shrink: ``released`` (part of what was asked, possibly less, possibly
    nothing) was taken from the subjob, which goes on with the rest of its data."""

    time: float
    subjob_id: int
    node: int
    released: IntervalSet


class CacheChanged(NamedTuple):
    """A node's cache changed outside any subjob (a worker restart, an operator's purge)."""

    time: float
    node: int
    added: IntervalSet = _EMPTY
    evicted: IntervalSet = _EMPTY


class NodeLost(NamedTuple):
    """A node is gone. ``remaining`` is what its running subjob had not processed (None: the
    engine cannot tell, so the whole subjob is done again); the rest counts as processed."""

    time: float
    node: int
    remaining: IntervalSet | None = None


class Tick(NamedTuple):
    """Time passed: the answer to a WakeAt action (period ends, fairness deadlines)."""

    time: float


Event = JobArrived | SubjobFinished | SubjobStopped | SubjobShrunk | CacheChanged | NodeLost | Tick
