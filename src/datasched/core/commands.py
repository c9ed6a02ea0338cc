"""The commands a policy acts through (:class:`~datasched.core.policy.SchedulerView`): start,
assign, preempt, split, queue, park, wake, fetch, replicate, pin, evict. A base of
:class:`~datasched.core.scheduler.Scheduler`, which keeps the books they change."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator

from datasched.core.actions import (
    Action,
    Assign,
    Evict,
    Fetch,
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
from datasched.core.model import Subjob
from datasched.core.policy import JobView, Policy
from datasched.core.state import JobState, Running, SchedulerError

__all__ = ["Commands"]

_EMPTY = IntervalSet()


class Commands(Estimates):
    """Policies' commands over the scheduler's state (see the module docstring)."""

    # Provided by the scheduler.
    policy: Policy
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

    def new_subjob(
        self,
        js: JobView,
        data: IntervalSet,
        *,
        cached_on: int | None = None,
        preemptible: bool = False,
    ) -> Subjob:
        """Create a subjob of ``js`` over ``data`` (which the caller has taken from the job)."""
        sj = Subjob(next(self._subjob_ids), js.job_id, data, cached_on, preemptible)
        self.jobs[js.job_id].live[sj.subjob_id] = sj
        return sj

    def start(self, sj: Subjob, slot: int) -> None:
        """Run ``sj`` on the free (or reserved) ``slot``; a parked subjob leaves its job's
        parked list."""
        self._take_slot(slot)
        self._launch(sj, slot)
        self._out.append(Start(sj, slot, *self.policy.read_mode(self, sj, slot)))

    def assign(self, sj: Subjob, slot: int) -> None:
        """Answer a pull: run exactly ``sj`` on ``slot`` as one packet."""
        self._take_slot(slot)
        self._launch(sj, slot)
        self._out.append(Assign(sj, slot, *self.policy.read_mode(self, sj, slot)))

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
        if sj.subjob_id not in js.live:
            raise SchedulerError(f"subjob {sj.subjob_id} is not waiting to run")
        if sj.subjob_id in self._parked:
            self._unpark(js, sj)
        if js.first_start_s is None:
            js.first_start_s = self.now
        js.running_slots.add(slot)
        self.node_running[self.slot_node[slot]] += 1
        r = Running(sj, slot, self.now, self.s_per_event_on(slot, sj.data, js.job.cpu_s_per_event))
        self.running[slot] = r
        self._push_end(r)
        self.policy.started(self, sj, slot)
        return js

    def preempt(self, slot: int, replacement: Subjob | None = None) -> None:
        """Ask the engine to stop the subjob on ``slot``. Once it has stopped, its rest goes
        back to the policy (:meth:`Policy.work_returned`) and ``replacement``, if given, starts
        on the slot (else the slot is offered to the policy like any freed one)."""
        r = self.running[slot]
        if not r.settled:
            raise SchedulerError(f"slot {slot} is already being preempted or shrunk")
        r.stopping = True
        if replacement is not None:
            self._replacements[r.subjob.subjob_id] = replacement
        self._out.append(Preempt(r.subjob.subjob_id, slot))

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
        if front:
            js.suspended.appendleft(sj)
        else:
            js.suspended.append(sj)
        self._parked.add(sj.subjob_id)

    def take_suspended(self, sj: Subjob) -> None:
        """Take a parked subjob out of its job's list (starting it does so too)."""
        self._unpark(self.jobs[sj.job_id], sj)

    def _unpark(self, js: JobState, sj: Subjob) -> None:
        js.suspended.remove(sj)
        self._parked.discard(sj.subjob_id)

    def discard(self, sj: Subjob) -> None:
        """Forget a waiting (never started, or parked) subjob whose data the policy is
        about to hand out again as new subjobs; the books stay exact only if it does."""
        js = self.jobs[sj.job_id]
        for slot in js.running_slots:
            if self.running[slot].subjob.subjob_id == sj.subjob_id:
                raise SchedulerError(f"subjob {sj.subjob_id} is running: preempt it instead")
        del js.live[sj.subjob_id]
        if sj.subjob_id in self._parked:
            self._unpark(js, sj)

    def note_released(self, js: JobView) -> None:
        """Record that a policy holding jobs back (delayed scheduling) let ``js`` go now."""
        self.jobs[js.job_id].released_s = self.now

    def wake_at(self, time: float) -> None:
        self._wakes += 1
        self._out.append(WakeAt(time))

    def fetch(self, node: int, data: IntervalSet, source: int | None = None) -> None:
        """Bring ``data`` into ``node``'s cache (from ``source``'s cache, else tertiary);
        answered by FetchDone, then :meth:`Policy.data_arrived`."""
        self._fetches.setdefault(node, []).append(data)
        self._transfers += 1
        self._out.append(Fetch(node, data, source))

    def replicate(self, source: int, node: int, data: IntervalSet) -> None:
        """Copy ``data`` from ``source``'s cache into ``node``'s; answered by TransferDone."""
        self._fetches.setdefault(node, []).append(data)
        self._transfers += 1
        self._out.append(Replicate(source, node, data))

    def pin(self, node: int, data: IntervalSet) -> int:
        """Keep ``data`` in ``node``'s cache until :meth:`release_pin` of the token."""
        token = next(self._pin_ids)
        self._pins[token] = (node, data)
        self._out.append(Pin(node, data, token))
        return token

    def release_pin(self, node: int, token: int) -> None:
        if self._pins.pop(token, None) is not None:
            self._out.append(Unpin(node, token))

    def evict(self, node: int, data: IntervalSet) -> None:
        """Drop ``data`` from ``node``'s cache (the engine answers with what went)."""
        self._out.append(Evict(node, data))

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
        if not r.settled:
            return False
        minimum = self.min_subjob_events
        done = r.estimated_done(self.now)
        left = r.subjob.data.length - done
        if left < 2 * minimum:
            return False  # (before cutting: a third of the calls end here)
        _, rest = r.subjob.data.head(done)
        give = pick(rest) if pick is not None else _EMPTY
        if give.length < minimum or left - give.length < minimum:
            # A split leaves work on both slots; moving everything could ping-pong.
            share = self.balanced_share(slot, target, rest)
            give = self.cut(rest, left - round(left * share))[1]
        if give.length < minimum or left - give.length < minimum:
            return False
        self._reserve(target)
        self._splits[r.subjob.subjob_id] = target
        r.shrinking = True
        self._out.append(Shrink(r.subjob.subjob_id, slot, give))
        return True
