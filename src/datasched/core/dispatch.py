"""One dispatch and one event order for every engine (docs/design.md, "The event order").

:func:`apply` hands an action to the method of an :class:`ActionHandler` that carries it out.
It matches every concrete action class and ends with :func:`typing.assert_never`, so that
``mypy --strict`` refuses an action no engine handles: a new action class added to
:data:`~datasched.core.actions.Action` fails the type check here until it has a handler
method, instead of being ignored by an ``isinstance`` chain at run time.

:class:`EventPump` is the order in which an engine feeds events to the scheduler, written
once for the simulator, the runtime and the tests' engines. Events the world produces
(arrivals, finishes, node losses, wake-ups) are *external*; the answers an engine gives to
actions while it carries them out (the SubjobStopped of a Preempt, the SubjobShrunk of a
Shrink, the CacheChanged of an Evict) are *follow-ups*. The pump handles one external event,
applies all of its actions, then handles the follow-ups in the order they were emitted
(breadth first: a follow-up's own follow-ups join the end of the queue) until none is left,
and only then the next external event. So a policy sees the same interleaving of events
whichever engine runs it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, assert_never

from datasched.core.actions import (
    Action,
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    JobHeld,
    JobReleased,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    Unpin,
    WakeAt,
)
from datasched.core.events import Event
from datasched.core.scheduler import Scheduler

__all__ = ["ActionHandler", "EventPump", "apply"]


class ActionHandler(Protocol):
    """What an engine does for each action (see :mod:`datasched.core.actions` for what each
    asks and which event answers it). An answer the engine gives at once goes to its
    :meth:`EventPump.emit`, never straight back to the scheduler."""

    def on_start(self, action: Start | Assign) -> None:
        """Run the subjob on the slot (a push, or the answer to a pull)."""

    def on_preempt(self, action: Preempt) -> None:
        """Stop the slot's subjob; answered by SubjobStopped."""

    def on_shrink(self, action: Shrink) -> None:
        """Take part of what the slot's subjob has left; answered by SubjobShrunk."""

    def on_wake_at(self, action: WakeAt) -> None:
        """Send a Tick at the time asked."""

    def on_fetch(self, action: Fetch) -> None:
        """Bring data into a node's cache; answered by FetchDone."""

    def on_replicate(self, action: Replicate) -> None:
        """Copy data between nodes' caches; answered by TransferDone."""

    def on_pin(self, action: Pin) -> None:
        """Keep data in a node's cache until the Unpin of its token."""

    def on_unpin(self, action: Unpin) -> None:
        """End a pin."""

    def on_evict(self, action: Evict) -> None:
        """Drop data from a node's cache; answered by CacheChanged."""

    def on_job_completed(self, action: JobCompleted) -> None:
        """Record and report a job that completed."""

    def on_job_failed(self, action: JobFailed) -> None:
        """Record and report a job that ended without all of its events processed."""

    def on_job_held(self, action: JobHeld) -> None:
        """Report a job the policy holds back on purpose (and until when)."""

    def on_job_released(self, action: JobReleased) -> None:
        """Report that a held job was let go."""


def apply(action: Action, handler: ActionHandler) -> None:
    """Carry out ``action`` with ``handler``'s method for its class (the most frequent
    classes first: this runs for every action of a simulation)."""
    match action:
        case Start() | Assign():
            handler.on_start(action)
        case JobCompleted():
            handler.on_job_completed(action)
        case Preempt():
            handler.on_preempt(action)
        case Shrink():
            handler.on_shrink(action)
        case WakeAt():
            handler.on_wake_at(action)
        case JobFailed():
            handler.on_job_failed(action)
        case Fetch():
            handler.on_fetch(action)
        case Replicate():
            handler.on_replicate(action)
        case Pin():
            handler.on_pin(action)
        case Unpin():
            handler.on_unpin(action)
        case Evict():
            handler.on_evict(action)
        case JobHeld():
            handler.on_job_held(action)
        case JobReleased():
            handler.on_job_released(action)
        case _:
            assert_never(action)


def _no_timer() -> float:
    return 0.0


class EventPump:
    """Feeds events to ``scheduler`` in the one order of every engine (see the module
    docstring) and applies the actions with ``handler``.

    :meth:`emit` queues an event: while the pump is applying actions it is a follow-up,
    otherwise an external event. :meth:`pump` handles queued events until none is left.
    ``handled`` counts the events handled, ``scheduling_s`` the seconds spent in
    :meth:`Scheduler.handle` as the engine's ``timer`` tells (the core has no clock; without
    a timer, none are counted).

    ``restamp``: an engine on a real clock (the runtime) stamps each event when it queues
    it, and may queue several external events before it pumps; a follow-up of the first,
    stamped later, is handled before the second. With ``restamp``, an external event stamped
    earlier than the last event handled is handled at that event's time (it is handled
    then, and the scheduler's time never goes back). Without it (the simulator, whose
    follow-ups share their cause's instant), such an event is the engine's error, which
    :meth:`Scheduler.handle` reports.
    """

    __slots__ = (
        "_external",
        "_follow",
        "_handler",
        "_on",
        "_pumping",
        "_restamp",
        "_timer",
        "handled",
        "scheduler",
        "scheduling_s",
    )

    def __init__(
        self,
        scheduler: Scheduler,
        handler: ActionHandler,
        *,
        timer: Callable[[], float] | None = None,
        restamp: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self._timer = timer if timer is not None else _no_timer
        self._handler = handler
        self._on: dict[type, Callable[[Any], None]] = {
            Start: handler.on_start,
            Assign: handler.on_start,
            JobCompleted: handler.on_job_completed,
            Preempt: handler.on_preempt,
            Shrink: handler.on_shrink,
            WakeAt: handler.on_wake_at,
            JobFailed: handler.on_job_failed,
            Fetch: handler.on_fetch,
            Replicate: handler.on_replicate,
            Pin: handler.on_pin,
            Unpin: handler.on_unpin,
            Evict: handler.on_evict,
            JobHeld: handler.on_job_held,
            JobReleased: handler.on_job_released,
        }
        """:func:`apply`'s choice by the action's exact class, looked up in :meth:`pump`
        instead of calling it (a call and a chain of class tests less per action)."""
        self._restamp = restamp
        self._external: deque[Event] = deque()
        self._follow: deque[Event] = deque()
        self._pumping = False
        self.handled = 0
        self.scheduling_s = 0.0

    def emit(self, event: Event) -> None:
        """Queue ``event``: a follow-up while actions are applied, else an external event."""
        (self._follow if self._pumping else self._external).append(event)

    def pending(self) -> int:
        """Events queued and not handled yet."""
        return len(self._external) + len(self._follow)

    def pump(self) -> int:
        """Handle every queued event, each external one with all of its follow-ups before
        the next; the number handled. Called while pumping (from a handler), it does
        nothing: the pump already running handles what was queued."""
        if self._pumping:
            return 0
        external, follow = self._external, self._follow
        handle, handler, timer, on = self.scheduler.handle, self._handler, self._timer, self._on
        handled = 0
        self._pumping = True
        try:
            while follow or external:
                if follow:
                    event = follow.popleft()
                else:
                    event = external.popleft()
                    if self._restamp and event.time < self.scheduler.now:
                        event = event._replace(time=self.scheduler.now)
                t0 = timer()
                actions = handle(event)
                self.scheduling_s += timer() - t0
                handled += 1
                for action in actions:
                    method = on.get(type(action))
                    if method is not None:
                        method(action)
                    else:
                        apply(action, handler)  # a subclass of an action's class
        finally:
            self._pumping = False
        self.handled += handled
        return handled

    def handle(self, event: Event) -> int:
        """Queue an external event and pump: the number of events handled (it and the
        follow-ups it caused, and whatever was queued before it). :meth:`emit` written out:
        this runs for every event of a simulation."""
        (self._follow if self._pumping else self._external).append(event)
        return self.pump()
