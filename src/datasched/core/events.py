"""What happens to the scheduler: the inputs of :meth:`Scheduler.handle`.

Each event carries its own timestamp (seconds); the core has no clock. Engines (the simulator,
the runtime) turn the world into these. A *slot* is one processing slot of a node (a CPU, a
PROOF worker); a *node* is the machine whose disk cache its slots share.

Events, actions and subjobs are immutable named tuples rather than frozen dataclasses: a
simulated job makes about a hundred of them, and a frozen dataclass costs three times as much
to build (its ``__init__`` goes through ``object.__setattr__`` field by field), which was 4 %
of the instructions of an out-of-order simulation.
"""

from __future__ import annotations

from typing import NamedTuple

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Node

__all__ = [
    "ArrivalsClosed",
    "CacheChanged",
    "Event",
    "FetchDone",
    "JobArrived",
    "JobCancelled",
    "NodeJoined",
    "NodeLost",
    "SubjobFinished",
    "SubjobShrunk",
    "SubjobStopped",
    "Tick",
    "TransferDone",
    "WorkRequested",
]

_EMPTY = IntervalSet()


class JobArrived(NamedTuple):
    """A job was submitted."""

    time: float
    job: Job


class JobCancelled(NamedTuple):
    """The user (or the engine, for a job that cannot go on) withdrew a job: its running
    subjobs are stopped and the rest of its events are dropped, unprocessed."""

    time: float
    job_id: int
    reason: str = "cancelled"


class SubjobFinished(NamedTuple):
    """A subjob processed all of its events on ``slot``.

    ``cache_added`` and ``cache_evicted`` report what the slot's node cache gained and lost
    while it ran, so the master's cache directory stays true. ``cpu_s``: the CPU seconds its
    processing took, where the engine measured them (None: not known; a policy then counts
    the slot's time).
    """

    time: float
    subjob_id: int
    slot: int
    cache_added: IntervalSet = _EMPTY
    cache_evicted: IntervalSet = _EMPTY
    cpu_s: float | None = None


class SubjobStopped(NamedTuple):
    """A subjob stopped before its end: in answer to a Preempt, or on the engine's own
    account (a worker restarted under its name lost the packets it had in flight).

    ``remaining`` is what it had not processed; everything else of its data was processed.
    ``cpu_s`` as for :class:`SubjobFinished` (of what it processed).
    """

    time: float
    subjob_id: int
    slot: int
    remaining: IntervalSet
    cache_added: IntervalSet = _EMPTY
    cache_evicted: IntervalSet = _EMPTY
    cpu_s: float | None = None


class SubjobShrunk(NamedTuple):
    """The answer to a Shrink: ``released`` (part of what was asked, possibly less, possibly
    nothing) was taken from the subjob, which goes on with the rest of its data."""

    time: float
    subjob_id: int
    slot: int
    released: IntervalSet


class WorkRequested(NamedTuple):
    """A slot asks for work (a pull, PROOF's ``GetNextPacket``).

    A finish or a stop that frees a slot counts as its request already; engines send this
    for slots that become free otherwise, or that ask ahead. A push policy may ignore it.
    """

    time: float
    slot: int


class CacheChanged(NamedTuple):
    """A node's cache changed outside any subjob (a worker restart, an operator's purge, the
    answer to an Evict)."""

    time: float
    node: int
    added: IntervalSet = _EMPTY
    evicted: IntervalSet = _EMPTY


class FetchDone(NamedTuple):
    """The answer to a Fetch: ``added`` of the asked ``data`` is now in ``node``'s cache
    (less than asked if the source failed or the cache had no room), ``evicted`` made room."""

    time: float
    node: int
    data: IntervalSet
    added: IntervalSet
    evicted: IntervalSet = _EMPTY


class TransferDone(NamedTuple):
    """The answer to a Replicate: ``added`` of ``data`` copied from ``source``'s cache into
    ``node``'s (less than asked if the source went away or the cache had no room)."""

    time: float
    source: int
    node: int
    data: IntervalSet
    added: IntervalSet
    evicted: IntervalSet = _EMPTY


class NodeJoined(NamedTuple):
    """A node joined the cluster, or came back after a failure (with the same id)."""

    time: float
    node: Node


class NodeLost(NamedTuple):
    """A node is gone, with its slots and its cache.

    ``remaining`` gives, for each slot that was running a subjob, what that subjob had not
    processed ``(slot, remainder)``; the rest of it counts as processed. A running slot not
    listed counts nothing as processed: its whole subjob is done again.
    """

    time: float
    node: int
    remaining: tuple[tuple[int, IntervalSet], ...] = ()


class ArrivalsClosed(NamedTuple):
    """No job will arrive any more (a finite jobs file has submitted its last one).

    A policy that holds jobs back waiting for more to come (delayed scheduling's period)
    may let them go now (:meth:`~datasched.core.policy.Policy.arrivals_closed`). An engine
    with an open end (a service) never sends it; a JobArrived after it is an engine's error.
    """

    time: float


class Tick(NamedTuple):
    """Time passed: the answer to a WakeAt action (period ends, fairness deadlines)."""

    time: float


Event = (
    JobArrived
    | JobCancelled
    | SubjobFinished
    | SubjobStopped
    | SubjobShrunk
    | WorkRequested
    | CacheChanged
    | FetchDone
    | TransferDone
    | NodeJoined
    | NodeLost
    | Tick
    | ArrivalsClosed
)
