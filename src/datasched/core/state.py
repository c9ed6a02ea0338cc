"""The scheduler's records: one per job in the system, one per running subjob.

Policies see them through the read-only :class:`~datasched.core.policy.JobView` and
:class:`~datasched.core.policy.RunningView`; only the scheduler changes them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from datasched.core.model import Job, Subjob

__all__ = ["JobState", "Running", "SchedulerError"]


class SchedulerError(RuntimeError):
    """An engine or a policy broke the protocol (a bug, never bad user input)."""


@dataclass(slots=True, eq=False)
class JobState:
    """The master's record of one job in the system."""

    job: Job
    done_events: int = 0
    first_start_s: float | None = None
    released_s: float | None = None
    """Set by policies that hold jobs back (delayed scheduling): when this one was let go."""
    live: dict[int, Subjob] = field(default_factory=dict)
    """Subjobs not yet finished: running, stopping, waiting in a queue or parked."""
    suspended: deque[Subjob] = field(default_factory=deque)
    """Subjobs parked with the job (suspended, or returned), the next to resume first."""
    running_slots: set[int] = field(default_factory=set)
    cancelled: bool = False
    cancel_reason: str = ""
    job_id: int = field(init=False)
    """``job.job_id``, kept as a field: read on every start and finish."""

    def __post_init__(self) -> None:
        self.job_id = self.job.job_id

    @property
    def started(self) -> bool:
        return self.first_start_s is not None

    @property
    def remaining_events(self) -> int:
        return self.job.n_events - self.done_events


@dataclass(slots=True, eq=False)
class Running:
    """A subjob running on a slot, with the master's estimate of its pace."""

    subjob: Subjob
    slot: int
    start_s: float
    s_per_event: float
    stopping: bool = False
    """A Preempt is on its way: the subjob is leaving the slot."""
    shrinking: bool = False
    """A Shrink is on its way: part of the subjob is being taken away."""
    end_s: float = 0.0
    """Estimated end: ``start_s`` plus its events at ``s_per_event``."""

    def __post_init__(self) -> None:
        self.end_s = self.start_s + self.subjob.data.length * self.s_per_event

    @property
    def settled(self) -> bool:
        """No Preempt or Shrink is waiting for its answer (the subjob may be asked again)."""
        return not (self.stopping or self.shrinking)

    def estimated_done(self, now: float) -> int:
        if self.s_per_event <= 0:
            return 0
        return min(self.subjob.data.length, int((now - self.start_s) / self.s_per_event))

    def estimated_remaining(self, now: float) -> int:
        return self.subjob.data.length - self.estimated_done(now)
