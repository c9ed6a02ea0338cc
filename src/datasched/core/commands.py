"""The commands a policy acts through (:class:`~datasched.core.policy.SchedulerView`): start,
assign, preempt, split, re-cut, queue, park, wake, fetch, replicate, pin, evict. A base of
:class:`~datasched.core.scheduler.Scheduler`, which keeps the books they change.

Every change of a subjob's state goes through :meth:`Commands._transition`, which checks it
against :data:`~datasched.core.state.LEGAL_TRANSITIONS`; subjobs are made only from events no
live subjob holds (:meth:`Commands.new_subjob` checks the job's unissued part) or by
:meth:`Commands.resplit`, which checks that the parts cover the subjob they replace exactly.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from datasched.core.actions import (
    Action,
    Assign,
    Evict,
    Fetch,
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
from datasched.core.estimates import Estimates
from datasched.core.intervals import IntervalSet
from datasched.core.model import Part, Subjob, _tuple_new
from datasched.core.policy import JobView, Policy
from datasched.core.state import (
    ALLOWED_NEW,
    JobState,
    Running,
    SchedulerError,
    SubjobState,
    show_events,
)
from datasched.core.trace import Transition

__all__ = ["Commands"]

_EMPTY = IntervalSet()
_QUEUED = SubjobState.QUEUED
_PARKED = SubjobState.PARKED
_RUNNING = SubjobState.RUNNING
_STOPPING = SubjobState.STOPPING
_SHRINKING = SubjobState.SHRINKING
_DONE = SubjobState.DONE
_RUNNING_BIT: int = _RUNNING.bit  # type: ignore[attr-defined]


class Commands(Estimates):
    """Policies' commands over the scheduler's state (see the module docstring)."""

    # Provided by the scheduler.
    policy: Policy
    _started_hook: Callable[[Commands, Subjob, int], None] | None
    """``policy.started``, or None where the policy keeps the default (which does nothing)."""
    _reads_fixed: bool
    """Whether the policy keeps the default ``read_mode`` (its ``reads`` for every subjob)."""
    jobs: dict[int, JobState]
    job_queue: deque[int]
    _idle: list[int]
    _reserved: set[int]
    _lost: set[int]
    _replacements: dict[int, Subjob]
    _splits: dict[int, int]
    _parked: set[int]
    _fetches: dict[int, list[IntervalSet]]
    _transfers: int
    _pins: dict[int, tuple[int, IntervalSet]]
    _pin_ids: Iterator[int]
    _wakes: int
    _subjob_ids: Iterator[int]
    _out: list[Action]
    _freed: list[tuple[int, JobState | None]]
    node_slots: list[list[int]]
    node_running: list[int]
    _nodes: list[int]
    left_cpu_s: dict[int, float]
    stimulus_id: int
    arrivals_closed: bool
    _states: dict[int, SubjobState]
    _event_kind: type
    _changes: list[Transition] | None

    # -- views for policies (see SchedulerView) -----------------------------------------------

    @property
    def idle_slots(self) -> list[int]:
        """Free slots, lowest first (read-only: use the commands to change it)."""
        return self._idle

    @property
    def nodes(self) -> list[int]:
        """Nodes in the cluster now, lowest first."""
        return self._nodes

    def is_idle(self, slot: int) -> bool:
        i = bisect_left(self._idle, slot)
        return i < len(self._idle) and self._idle[i] == slot

    def is_lost(self, node: int) -> bool:
        return node in self._lost

    def slots_of(self, node: int) -> list[int]:
        return self.node_slots[node]

    @property
    def n_slots(self) -> int:
        return len(self.slot_node)

    def fetching(self, node: int) -> IntervalSet:
        out = _EMPTY
        for data in self._fetches.get(node, ()):
            out = out | data
        return out

    def pinned(self, node: int) -> IntervalSet:
        """What the master has pinned in ``node``'s cache."""
        out = _EMPTY
        for n, data in self._pins.values():
            if n == node:
                out = out | data
        return out

    # -- subjobs' states ---------------------------------------------------------------------

    def _transition(self, sj: Subjob, to: SubjobState, r: Running | None = None) -> None:
        """The one place a subjob changes state: checked against the table of legal changes
        (a broken protocol raises SchedulerError), mirrored on its running record ``r``, and
        logged when someone listens (validation, a trace, a history)."""
        sid = sj.subjob_id
        states = self._states
        was = states.get(sid)
        if not (ALLOWED_NEW if was is None else was.allowed) & to.bit:  # type: ignore[attr-defined]
            if was is None:
                raise SchedulerError(
                    f"subjob {sid} of job {sj.job_id}: not live (finished, re-cut or never "
                    f"made), cannot become {to.value}"
                )
            raise SchedulerError(
                f"subjob {sid} of job {sj.job_id}: {was.value} -> {to.value} is not a legal "
                "transition"
            )
        if to is _DONE:
            del states[sid]
        else:
            states[sid] = to
        if r is not None:
            r.state = to
        if self._changes is not None:
            self._changes.append(
                Transition(
                    self.stimulus_id,
                    self.now,
                    self._event_kind.__name__,
                    sj.job_id,
                    sid,
                    None if was is None else was.value,
                    to.value,
                    -1 if r is None else r.slot,
                )
            )

    def state_of(self, subjob_id: int) -> SubjobState:
        """The subjob's state (DONE once it has left the books, or for an unknown id)."""
        return self._states.get(subjob_id, _DONE)

    def _make_subjob(
        self, js: JobState, data: IntervalSet, cached_on: int | None, preemptible: bool
    ) -> Subjob:
        """A new live subjob of ``js``, unchecked: its events come from a subjob that has
        just left the books (a stopped rest, a released part, a re-cut)."""
        sid = next(self._subjob_ids)
        sj = _tuple_new(Subjob, (sid, js.job_id, data, cached_on, preemptible))
        js.live[sid] = sj
        states = self._states
        if self._changes is None and sid not in states:
            # ``_transition`` written out where nobody listens (a subjob made at every
            # start of a split part): "not created yet" may only become QUEUED.
            states[sid] = _QUEUED
        else:
            self._transition(sj, _QUEUED)
        return sj

    def new_subjob(
        self,
        js: JobView,
        data: IntervalSet,
        *,
        cached_on: int | None = None,
        preemptible: bool = False,
    ) -> Subjob:
        """Create a subjob of ``js`` over ``data``, taken from the job's events that no live
        subjob holds yet (a job queued whole, a pool of packets, what :meth:`discard` gave
        back). Events held by a live subjob, processed, or not the job's raise
        SchedulerError: re-cutting a subjob is :meth:`resplit`."""
        state = self.jobs[js.job_id]
        pool = state.unissued
        if data.issubset(pool):
            state.unissued = _EMPTY if data.length == pool.length else pool - data
        else:
            raise SchedulerError(
                f"new_subjob of job {js.job_id}: events {show_events(data - pool)} are held by "
                "a live subjob, processed, or not the job's (re-cut a subjob with resplit)"
            )
        return self._make_subjob(state, data, cached_on, preemptible)

    def resplit(self, sj: Subjob, parts: Sequence[IntervalSet | Part]) -> list[Subjob]:
        """Replace the waiting (queued or parked) ``sj`` by new subjobs over ``parts``, which
        must cover its events exactly: none empty, no two overlapping, none outside it, none
        left out. A part given as events alone keeps ``sj``'s ``cached_on`` and
        ``preemptible``; a :class:`~datasched.core.model.Part` names its own. Atomic: on a
        refusal (SchedulerError) nothing has changed. Returns the new subjobs in the order of
        ``parts``, queued: the caller places them (start, suspend, or a queue of its own)."""
        js = self.jobs.get(sj.job_id)
        live = None if js is None else js.live.get(sj.subjob_id)
        if js is None or (live is not sj and live != sj):
            raise SchedulerError(f"resplit: subjob {sj.subjob_id} of job {sj.job_id} is not live")
        state = self._states[sj.subjob_id]
        if state is not _QUEUED and state is not _PARKED:
            raise SchedulerError(
                f"resplit: subjob {sj.subjob_id} is {state.value}: preempt or split it instead"
            )
        specs: list[Part] = []
        union = _EMPTY
        total = 0
        for i, part in enumerate(parts):
            if isinstance(part, IntervalSet):
                spec = Part(part, sj.cached_on, sj.preemptible)
            else:
                spec = part
            data = spec.data
            if not data:
                raise SchedulerError(f"resplit of subjob {sj.subjob_id}: part {i} is empty")
            if not data.issubset(sj.data):
                raise SchedulerError(
                    f"resplit of subjob {sj.subjob_id}: part {i} holds events "
                    f"{show_events(data - sj.data)} that are not the subjob's"
                )
            if union.overlaps(data):
                raise SchedulerError(
                    f"resplit of subjob {sj.subjob_id}: part {i} overlaps the parts before it "
                    f"on {show_events(data & union)}"
                )
            union = union | data
            total += data.length
            specs.append(spec)
        if total != sj.data.length:
            raise SchedulerError(
                f"resplit of subjob {sj.subjob_id}: the parts leave out "
                f"{show_events(sj.data - union)}"
            )
        if state is _PARKED:
            self._unpark(js, sj)
        del js.live[sj.subjob_id]
        self._transition(sj, _DONE)
        return [self._make_subjob(js, p.data, p.cached_on, p.preemptible) for p in specs]

    def start(self, sj: Subjob, slot: int) -> None:
        """Run ``sj`` on the free (or reserved) ``slot``; a parked subjob leaves its job's
        parked list."""
        self._take_slot(slot)
        self._launch(sj, slot)
        policy = self.policy
        mode = policy.reads if self._reads_fixed else policy.read_mode(self, sj, slot)
        self._out.append(_tuple_new(Start, (sj, slot, *mode, self.stimulus_id)))

    def assign(self, sj: Subjob, slot: int) -> None:
        """Answer a pull: run exactly ``sj`` on ``slot`` as one packet."""
        self._take_slot(slot)
        self._launch(sj, slot)
        self._out.append(Assign(sj, slot, *self.policy.read_mode(self, sj, slot), self.stimulus_id))

    def _take_slot(self, slot: int) -> None:
        if slot in self._reserved:
            self._reserved.discard(slot)
            return
        i = bisect_left(self._idle, slot)
        if i == len(self._idle) or self._idle[i] != slot:
            raise SchedulerError(f"slot {slot} is not free")
        del self._idle[i]

    def _launch(self, sj: Subjob, slot: int) -> JobState:
        js = self.jobs[sj.job_id]
        sid = sj.subjob_id
        live = js.live.get(sid)
        if live is not sj and live != sj:
            raise SchedulerError(f"subjob {sid} is not waiting to run")
        if sid in self._parked:
            self._unpark(js, sj)
        if js.first_start_s is None:
            js.first_start_s = self.now
        r = Running(sj, slot, self.now, self.s_per_event_on(slot, sj.data, js.job.cpu_s_per_event))
        states = self._states
        was = states.get(sid)
        allowed: int = 0 if was is None else was.allowed  # type: ignore[attr-defined]
        if self._changes is None and allowed & _RUNNING_BIT:
            # ``_transition`` written out where nobody listens (every start), the same
            # check of the table; ``r`` is new, RUNNING already.
            states[sid] = _RUNNING
        else:
            self._transition(sj, _RUNNING, r)
        js.running_slots.add(slot)
        self.node_running[self.slot_node[slot]] += 1
        self.running[slot] = r
        self._push_end(r)
        if self._started_hook is not None:
            self._started_hook(self, sj, slot)
        return js

    def preempt(self, slot: int, replacement: Subjob | None = None) -> None:
        """Ask the engine to stop the subjob on ``slot``. Once it has stopped, its rest goes
        back to the policy (:meth:`Policy.work_returned`) and ``replacement``, if given, starts
        on the slot (else the slot is offered to the policy like any freed one)."""
        r = self.running[slot]
        if not r.settled:
            raise SchedulerError(f"slot {slot} is already being preempted or shrunk")
        self._transition(r.subjob, _STOPPING, r)
        if replacement is not None:
            self._replacements[r.subjob.subjob_id] = replacement
        self._out.append(Preempt(r.subjob.subjob_id, slot, self.stimulus_id))

    def queue_job(self, js: JobView) -> None:
        """Queue a job whole, last."""
        self.job_queue.append(js.job_id)

    def pop_queued_job(self) -> JobState | None:
        """The first job of the whole-job queue, taken out of it (None when empty)."""
        if not self.job_queue:
            return None
        return self.jobs[self.job_queue.popleft()]

    def suspend(self, sj: Subjob, *, front: bool = True) -> None:
        """Park a subjob that is not running with its job, to be resumed later."""
        js = self.jobs[sj.job_id]
        self._transition(sj, _PARKED)
        if front:
            js.suspended.appendleft(sj)
        else:
            js.suspended.append(sj)
        self._parked.add(sj.subjob_id)

    def _unpark(self, js: JobState, sj: Subjob) -> None:
        js.suspended.remove(sj)
        self._parked.discard(sj.subjob_id)

    def discard(self, sj: Subjob) -> None:
        """Forget a waiting (queued or parked) subjob: its events go back to the job's
        unissued part, for :meth:`new_subjob` to hand out again (a packetizer's pool). To
        replace it by other subjobs at once, :meth:`resplit` it."""
        js = self.jobs[sj.job_id]
        state = self._states.get(sj.subjob_id)
        if state is not _QUEUED and state is not _PARKED:
            what = "not live" if state is None else state.value
            raise SchedulerError(f"discard: subjob {sj.subjob_id} is {what}: it is not waiting")
        if state is _PARKED:
            self._unpark(js, sj)
        del js.live[sj.subjob_id]
        self._transition(sj, _DONE)
        js.unissued = js.unissued | sj.data

    def note_held(self, js: JobView, until: float) -> None:
        """Record that the policy holds ``js`` back on purpose until ``until`` (delayed
        scheduling's period end): the engine is told (:class:`JobHeld`), so that a run can
        say why the job waits. Holding it again (a later period) tells the new time."""
        state = self.jobs[js.job_id]
        if state.held_until == until:
            return
        state.held_until = until
        self._out.append(JobHeld(js.job_id, self.now, until, self.stimulus_id))

    def note_released(self, js: JobView) -> None:
        """Record that a policy holding jobs back (delayed scheduling) let ``js`` go now;
        the engine is told (:class:`JobReleased`) when :meth:`note_held` had held it."""
        state = self.jobs[js.job_id]
        state.released_s = self.now
        if state.held_until is not None:
            state.held_until = None
            self._out.append(JobReleased(js.job_id, self.now, self.stimulus_id))

    def wake_at(self, time: float) -> None:
        self._wakes += 1
        self._out.append(WakeAt(time, self.stimulus_id))

    def fetch(self, node: int, data: IntervalSet, source: int | None = None) -> None:
        """Bring ``data`` into ``node``'s cache (from ``source``'s cache, else tertiary);
        answered by FetchDone, then :meth:`Policy.data_arrived`."""
        self._fetches.setdefault(node, []).append(data)
        self._transfers += 1
        self._out.append(Fetch(node, data, source, self.stimulus_id))

    def replicate(self, source: int, node: int, data: IntervalSet) -> None:
        """Copy ``data`` from ``source``'s cache into ``node``'s; answered by TransferDone."""
        self._fetches.setdefault(node, []).append(data)
        self._transfers += 1
        self._out.append(Replicate(source, node, data, self.stimulus_id))

    def pin(self, node: int, data: IntervalSet) -> int:
        """Keep ``data`` in ``node``'s cache until :meth:`release_pin` of the token."""
        token = next(self._pin_ids)
        self._pins[token] = (node, data)
        self._out.append(Pin(node, data, token, self.stimulus_id))
        return token

    def release_pin(self, node: int, token: int) -> None:
        if self._pins.pop(token, None) is not None:
            self._out.append(Unpin(node, token, self.stimulus_id))

    def evict(self, node: int, data: IntervalSet) -> None:
        """Drop ``data`` from ``node``'s cache (the engine answers with what went)."""
        self._out.append(Evict(node, data, self.stimulus_id))

    def _reserve(self, slot: int) -> None:
        """Hold a free slot back for a split (it is not offered to anyone else)."""
        i = bisect_left(self._idle, slot)
        if i == len(self._idle) or self._idle[i] != slot:
            raise SchedulerError(f"slot {slot} is not free")
        del self._idle[i]
        self._reserved.add(slot)

    def _release_slot(self, slot: int, *, offer: bool = True) -> None:
        """Give a reserved slot back; it is offered to the policy like any freed slot unless
        ``offer`` is False (then it waits, idle, for the next event)."""
        self._reserved.discard(slot)
        if self.slot_node[slot] in self._lost:
            return
        insort(self._idle, slot)
        if offer:
            self._freed.append((slot, None))

    def split_running(
        self,
        slot: int,
        target: int,
        pick: Callable[[IntervalSet], IntervalSet] | None = None,
    ) -> bool:
        """Split the subjob running on ``slot`` and move a part of it to the free ``target``.

        By default the tail of what remains moves, sized so both parts end at about the same
        time (equal halves when both read at the same speed: ponce-hersch Table 1). ``pick``
        chooses the moved part instead (cache-oriented splitting moves what ``target``'s
        node caches), unless it leaves either side less than the minimal subjob. Returns
        False, doing nothing, when the estimated remainder is too small.

        The running subjob is shrunk, not stopped: it goes on with what it keeps, and what
        the engine releases starts on ``target`` as a new, preemptible subjob.
        """
        r = self.running[slot]
        if r.state is not _RUNNING:  # (``r.settled``, a property: a call)
            return False
        minimum = self.min_subjob_events
        data = r.subjob.data
        # ``r.estimated_done(self.now)`` written out: job splitting asks at every freed slot.
        spe = r.s_per_event
        done = 0 if spe <= 0 else min(data.length, int((self.now - r.start_s) / spe))
        left = data.length - done
        if left < 2 * minimum:
            return False  # (before cutting: a third of the calls end here)
        rest = data.drop(done)
        give = pick(rest) if pick is not None else _EMPTY
        if give.length < minimum or left - give.length < minimum:
            # A split leaves work on both slots; moving everything could ping-pong.
            share = self.balanced_share(slot, target, rest)
            n = left - round(left * share)
            # ``cut`` is ``head`` without file boundaries (range caches): only its rest built.
            give = self.cut(rest, n)[1] if self.space.boundaries else rest.drop(n)
        if give.length < minimum or left - give.length < minimum:
            return False
        self._reserve(target)
        self._splits[r.subjob.subjob_id] = target
        self._transition(r.subjob, _SHRINKING, r)
        self._out.append(_tuple_new(Shrink, (r.subjob.subjob_id, slot, give, self.stimulus_id)))
        return True
