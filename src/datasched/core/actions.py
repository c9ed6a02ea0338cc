"""What the scheduler asks for: the outputs of :meth:`Scheduler.handle`.

An action is a request; its outcome comes back as a later event (docs/design.md, "Events and
actions"):

=============  ==================================================================
action         answered by
=============  ==================================================================
Start, Assign  SubjobFinished, or SubjobStopped
Preempt        SubjobStopped (or the SubjobFinished that crossed it)
Shrink         SubjobShrunk
Fetch          FetchDone
Replicate      TransferDone
Evict          CacheChanged
WakeAt         Tick
Pin, Unpin     nothing: they take effect at once
=============  ==================================================================

``JobCompleted`` and ``JobFailed`` are notices for the engine to record and report, as are
``JobHeld`` and ``JobReleased`` (a policy holds a job back on purpose, then lets it go), so
that a run can say why a job waits.
Immutable named tuples, as events are (see :mod:`datasched.core.events` for why). Each ends
with ``cause``: the stimulus id of the event whose handling asked for it, which the scheduler
sets (:mod:`datasched.core.trace`); an action built elsewhere has -1.
"""

from __future__ import annotations

from typing import NamedTuple

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob

__all__ = [
    "Action",
    "Assign",
    "Evict",
    "Fetch",
    "JobCompleted",
    "JobFailed",
    "JobHeld",
    "JobReleased",
    "Pin",
    "Preempt",
    "Replicate",
    "Shrink",
    "Start",
    "Unpin",
    "WakeAt",
]


class Start(NamedTuple):
    """Run ``subjob`` on ``slot``, reading its events in ascending order (a push; the engine
    streams it in packets as it sees fit).

    ``cache_fill``: keep what is read from tertiary storage (or a peer, when ``replicate``) in the
    node's cache; ``fill_duplicates=False`` keeps only data that no other node caches.
    ``peer_reads``: data cached on another node may be read from there instead of from
    tertiary storage (ponce-hersch §4.2).
    """

    subjob: Subjob
    slot: int
    cache_fill: bool
    peer_reads: bool = False
    replicate: bool = False
    fill_duplicates: bool = True
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Assign(NamedTuple):
    """The answer to a pull (PROOF's packet): run exactly ``subjob`` on ``slot`` as one
    packet, then ask again. The reading options are those of :class:`Start`."""

    subjob: Subjob
    slot: int
    cache_fill: bool
    peer_reads: bool = False
    replicate: bool = False
    fill_duplicates: bool = True
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Preempt(NamedTuple):
    """Stop the subjob running on ``slot``; the engine answers with SubjobStopped."""

    subjob_id: int
    slot: int
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Shrink(NamedTuple):
    """Take ``release`` away from the subjob running on ``slot``, which goes on with the rest.

    The engine gives up what it has neither processed nor started (at once in the simulator,
    the packets not yet sent in the runtime) and answers with SubjobShrunk naming exactly
    that, before any other event of the subjob. A split is a Shrink plus a Start of what was
    released on another slot: the kept part runs on without a stop and a restart.
    """

    subjob_id: int
    slot: int
    release: IntervalSet
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Fetch(NamedTuple):
    """Bring ``data`` into ``node``'s cache ahead of its use: from tertiary storage, or from
    the cache of ``source`` when given (romosan's remote and local replication)."""

    node: int
    data: IntervalSet
    source: int | None = None
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Replicate(NamedTuple):
    """Copy ``data`` from ``source``'s cache into ``node``'s (a dataset scheduler's
    replication of popular data: ponce-hersch §4.2, ranganathan-foster's DataRandom)."""

    source: int
    node: int
    data: IntervalSet
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Pin(NamedTuple):
    """Keep ``data`` in ``node``'s cache until the Unpin of ``token`` (romosan's pin)."""

    node: int
    data: IntervalSet
    token: int
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Unpin(NamedTuple):
    """End the pin ``token`` on ``node``."""

    node: int
    token: int
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class Evict(NamedTuple):
    """Drop ``data`` (what is not pinned of it) from ``node``'s cache; the engine answers with
    CacheChanged naming what went."""

    node: int
    data: IntervalSet
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class WakeAt(NamedTuple):
    """Send a Tick at ``time`` (or as soon after as the engine can)."""

    time: float
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class JobCompleted(NamedTuple):
    """Notice: every event of the job has been processed (the engine records and reports it)."""

    job_id: int
    time: float
    first_start_s: float
    released_s: float = -1.0
    """When the policy released the job for scheduling (the end of its period, for delayed
    scheduling); -1 when it never held the job back."""
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class JobFailed(NamedTuple):
    """Notice: the job ended without all of its events processed (cancelled, or given up);
    ``processed`` events were."""

    job_id: int
    time: float
    reason: str
    processed: int
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class JobHeld(NamedTuple):
    """Notice: the policy holds the job back on purpose until ``until`` (the end of delayed
    scheduling's period), or until no more jobs can arrive, whichever comes first."""

    job_id: int
    time: float
    until: float
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


class JobReleased(NamedTuple):
    """Notice: a job the policy held back (a :class:`JobHeld` before) is let go now; it is
    scheduled from here on."""

    job_id: int
    time: float
    cause: int = -1
    """The stimulus id of the event whose handling asked for it (-1: none)."""


Action = (
    Start
    | Assign
    | Preempt
    | Shrink
    | Fetch
    | Replicate
    | Pin
    | Unpin
    | Evict
    | WakeAt
    | JobCompleted
    | JobFailed
    | JobHeld
    | JobReleased
)
