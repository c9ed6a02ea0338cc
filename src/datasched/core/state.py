"""The scheduler's records: one per job in the system, one per running subjob.

Policies see them through the read-only :class:`~datasched.core.policy.JobView` and
:class:`~datasched.core.policy.RunningView`; only the scheduler changes them.
"""

from __future__ import annotations

import enum
from collections import deque

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob

__all__ = [
    "LEGAL_TRANSITIONS",
    "ON_SLOT",
    "JobState",
    "Running",
    "SchedulerError",
    "SubjobState",
    "show_events",
]


class SchedulerError(RuntimeError):
    """An engine or a policy broke the protocol (a bug, never bad user input)."""


def show_events(data: IntervalSet) -> str:
    """Events for a message: ``[0, 10) [20, 30)`` (the first five ranges, then a count)."""
    ranges = data.ranges
    text = " ".join(f"[{a}, {b})" for a, b in ranges[:5]) or "none"
    return text if len(ranges) <= 5 else f"{text} and {len(ranges) - 5} more ranges"


class SubjobState(enum.Enum):
    """Where a subjob stands in the master's books (docs/design.md, "Invariants")."""

    QUEUED = "queued"
    """Live, waiting to run: in a policy's queue, or a replacement waiting for its slot."""
    PARKED = "parked"
    """Live, parked with its job (``JobState.suspended``)."""
    RUNNING = "running"
    """On a slot, nothing asked of it."""
    STOPPING = "stopping"
    """On a slot, a Preempt on its way."""
    SHRINKING = "shrinking"
    """On a slot, a Shrink on its way."""
    DONE = "done"
    """Gone from the books: finished, stopped (its rest is a new subjob), discarded or re-cut
    into new subjobs, or dropped with its cancelled job."""


_S = SubjobState
LEGAL_TRANSITIONS: dict[SubjobState | None, frozenset[SubjobState]] = {
    None: frozenset({_S.QUEUED}),  # created
    _S.QUEUED: frozenset({_S.PARKED, _S.RUNNING, _S.DONE}),
    _S.PARKED: frozenset({_S.QUEUED, _S.RUNNING, _S.DONE}),
    _S.RUNNING: frozenset({_S.STOPPING, _S.SHRINKING, _S.DONE}),
    _S.STOPPING: frozenset({_S.DONE}),
    _S.SHRINKING: frozenset({_S.RUNNING, _S.DONE}),
    _S.DONE: frozenset(),
}
"""State -> the states it may go to; None is "not created yet". The scheduler checks every
change against this table in one place (``Scheduler._transition``)."""

ON_SLOT = frozenset({_S.RUNNING, _S.STOPPING, _S.SHRINKING})
"""The states of a subjob that holds a slot."""

# The table as bit masks, for the scheduler's hot path: an Enum member's hash is a Python
# call, a bit test is not. ``state.bit``: the member's bit; ``state.allowed``: the bits of
# the states it may go to (``ALLOWED_NEW``: from "not created yet").
for _i, _member in enumerate(SubjobState):
    _member.bit = 1 << _i  # type: ignore[attr-defined]
for _member in SubjobState:
    _member.allowed = sum(t.bit for t in LEGAL_TRANSITIONS[_member])  # type: ignore[attr-defined]
ALLOWED_NEW: int = sum(t.bit for t in LEGAL_TRANSITIONS[None])  # type: ignore[attr-defined]
_RUNNING = SubjobState.RUNNING
_STOPPING = SubjobState.STOPPING
_SHRINKING = SubjobState.SHRINKING


class JobState:
    """The master's record of one job in the system.

    A plain class with slots, not a dataclass: compiled, it is an extension type whose
    fields the scheduler reads from its struct (core/state.pxd), which a dataclass cannot
    be. Compared by identity."""

    __slots__ = (
        "cancel_reason",
        "cancelled",
        "done_events",
        "first_start_s",
        "held_until",
        "job",
        "job_id",
        "live",
        "released_s",
        "running_slots",
        "suspended",
        "unissued",
    )

    job: Job
    done_events: int
    first_start_s: float | None
    released_s: float | None
    """Set by policies that hold jobs back (delayed scheduling): when this one was let go."""
    held_until: float | None
    """While a policy holds this job back on purpose: until when (``note_held``)."""
    live: dict[int, Subjob]
    """Subjobs not yet finished: running, stopping, waiting in a queue or parked."""
    unissued: IntervalSet
    """The job's events in no live subjob and not processed: what a policy has not cut into
    subjobs yet (a job queued whole, a packetizer's pool). With the live subjobs' data it
    partitions what is left of the job (:meth:`Scheduler.validate` checks it)."""
    suspended: deque[Subjob]
    """Subjobs parked with the job (suspended, or returned), the next to resume first."""
    running_slots: set[int]
    cancelled: bool
    cancel_reason: str
    job_id: int
    """``job.job_id``, kept as a field: read on every start and finish."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.job_id = job.job_id
        self.done_events = 0
        self.first_start_s = None
        self.released_s = None
        self.held_until = None
        self.live = {}
        self.unissued = job.data
        self.suspended = deque()
        self.running_slots = set()
        self.cancelled = False
        self.cancel_reason = ""

    def __repr__(self) -> str:
        return (
            f"JobState(job_id={self.job_id!r}, done_events={self.done_events!r}, "
            f"live={sorted(self.live)!r}, running_slots={sorted(self.running_slots)!r}, "
            f"cancelled={self.cancelled!r})"
        )

    @property
    def started(self) -> bool:
        return self.first_start_s is not None

    @property
    def remaining_events(self) -> int:
        return self.job.n_events - self.done_events


class Running:
    """A subjob running on a slot, with the master's estimate of its pace.

    A plain class with slots, not a dataclass: compiled, it is an extension type with its
    times as C doubles (core/state.pxd), which a dataclass cannot be. Compared by identity."""

    __slots__ = ("end_s", "s_per_event", "slot", "start_s", "state", "subjob")

    subjob: Subjob
    slot: int
    start_s: float
    s_per_event: float
    state: SubjobState
    """RUNNING, STOPPING or SHRINKING; only the scheduler's ``_transition`` sets it."""
    end_s: float
    """Estimated end: ``start_s`` plus its events at ``s_per_event``."""

    def __init__(
        self,
        subjob: Subjob,
        slot: int,
        start_s: float,
        s_per_event: float,
        state: SubjobState = SubjobState.RUNNING,
    ) -> None:
        # Written out, with the end computed here: a dataclass's ``__init__`` calling
        # ``__post_init__`` is two calls for each subjob started.
        self.subjob = subjob
        self.slot = slot
        self.start_s = start_s
        self.s_per_event = s_per_event
        self.state = state
        self.end_s = start_s + subjob.data.length * s_per_event

    @property
    def stopping(self) -> bool:
        """A Preempt is on its way: the subjob is leaving the slot."""
        return self.state is _STOPPING

    @property
    def shrinking(self) -> bool:
        """A Shrink is on its way: part of the subjob is being taken away."""
        return self.state is _SHRINKING

    @property
    def settled(self) -> bool:
        """No Preempt or Shrink is waiting for its answer (the subjob may be asked again)."""
        return self.state is _RUNNING

    def __repr__(self) -> str:
        return (
            f"Running(subjob={self.subjob!r}, slot={self.slot!r}, start_s={self.start_s!r}, "
            f"s_per_event={self.s_per_event!r}, state={self.state!r}, end_s={self.end_s!r})"
        )

    def estimated_done(self, now: float) -> int:
        if self.s_per_event <= 0:
            return 0
        return min(self.subjob.data.length, int((now - self.start_s) / self.s_per_event))

    def estimated_remaining(self, now: float) -> int:
        return self.subjob.data.length - self.estimated_done(now)
