"""What the scheduler asks for: the outputs of :meth:`Scheduler.handle`.

An action is a request; its outcome comes back as a later event (DESIGN.md, "The core").
Immutable named tuples, as events are (see :mod:`datasched.core.events` for why).
"""

from __future__ import annotations

from typing import NamedTuple

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob

__all__ = ["Action", "JobCompleted", "Preempt", "Shrink", "Start", "WakeAt"]


class Start(NamedTuple):
    """Run ``subjob`` on ``node``, reading its events in ascending order.

    ``cache_fill``: keep what is read from tertiary storage (or a peer, when ``replicate``) in the
    node's cache; ``fill_duplicates=False`` keeps only data that no other node caches.
    ``peer_reads``: data cached on another node may be read from there instead of from
    tertiary storage (ponce-hersch §4.2).
    """

    subjob: Subjob
    node: int
    cache_fill: bool
    peer_reads: bool = False
    replicate: bool = False
    fill_duplicates: bool = True


class Preempt(NamedTuple):
    """Stop the subjob running on ``node``; the engine answers with SubjobStopped."""

    subjob_id: int
    node: int


class Shrink(NamedTuple):
    """Take ``release`` away from the subjob running on ``node``, which goes on with the rest.

    The engine gives up what it has neither processed nor started (at once in the simulator,
    the packets not yet sent in the runtime) and answers with SubjobShrunk naming exactly
    that, before any other event of the subjob. A split is a Shrink plus a Start of what was
    released on another node: the kept part runs on without a stop and a restart.
    """

    subjob_id: int
    node: int
    release: IntervalSet


class WakeAt(NamedTuple):
    """Send a Tick at ``time`` (or as soon after as the engine can)."""

    time: float


class JobCompleted(NamedTuple):
    """Notice: every event of the job has been processed (the engine records and reports it)."""

    job_id: int
    time: float
    first_start_s: float
    released_s: float = -1.0
    """When the policy released the job for scheduling (the end of its period, for delayed
    scheduling); -1 when it never held the job back."""


Action = Start | Preempt | Shrink | WakeAt | JobCompleted
