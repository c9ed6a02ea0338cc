"""The scheduling core: a pure state machine, ``handle(event) -> list[Action]``.

It holds the master's view of the cluster (ponce-hersch §2.3: scheduling runs on a dedicated
master node): jobs, the whole-job queue, running and parked subjobs, free slots, fetches in
flight and the cache directory. A :class:`~datasched.core.policy.Policy` decides; the
scheduler keeps the books so that the subjobs of every job always partition what is left of
it, which is what makes "every event processed exactly once" hold whatever the policy does.

Suspending a running subjob is a two-step exchange, the same in every engine: the scheduler
sends Preempt, the engine answers SubjobStopped with the unprocessed remainder (at once in the
simulator, at a packet boundary in the runtime); the remainder goes back to the policy
(:meth:`Policy.work_returned`) and the replacement the policy named takes the slot. Splitting
is the same exchange with Shrink and SubjobShrunk: the engine gives up part of what is left,
the subjob runs on with the rest, and the released part starts on the slot reserved for it.
Pending exchanges are records (which subjob replaces which, which slot a split goes to), not
closures, so the state can be inspected.

The books are checked, not just claimed: every change of a subjob's state goes through one
checked table (:mod:`datasched.core.state`), subjobs are cut only from events no live subjob
holds or re-cut with :meth:`resplit`, and :meth:`validate` checks the invariants whole
(docs/design.md, "Invariants and tracing"); with validation on (``validate=True``, or
``DATASCHED_VALIDATE=1`` in the environment when the scheduler is built) it runs after the
events. Each event gets a stimulus id that the actions it causes carry; a trace sink and a
bounded history record events, transitions and actions (:mod:`datasched.core.trace`).

No work is ever stranded: whatever comes back unprocessed (a preempted rest, a lost node's
work, a stop the engine made on its own) is handed to the policy's ``work_returned``, whose
default parks it with its job; a slot the policy leaves idle is given parked work; and if the
cluster ever stands still with work left (no slot busy, no answer or wake-up awaited, a slot
free) the scheduler raises :class:`SchedulerError` naming the policy, instead of hanging.

Length: one state machine. The handlers of the events, the books they keep and the check of
those books read and write the same private state; split over files they became mixins
sharing it, which hid which code may change what. The commands policies call live apart
(:mod:`datasched.core.commands`), as do the estimates.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import datasched
from datasched.core.actions import (
    Action,
    JobCompleted,
    JobFailed,
)
from datasched.core.commands import Commands
from datasched.core.data import DataSpace
from datasched.core.directory import CacheDirectory
from datasched.core.events import (
    ArrivalsClosed,
    CacheChanged,
    Event,
    FetchDone,
    JobArrived,
    JobCancelled,
    NodeJoined,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
    TransferDone,
    WorkRequested,
)
from datasched.core.hot import HotReplicator
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Subjob, Topology
from datasched.core.policy import Policy, Returned
from datasched.core.state import (
    ON_SLOT,
    JobState,
    Running,
    SchedulerError,
    SubjobState,
    show_events,
)
from datasched.core.trace import (
    TraceRecord,
    TraceSink,
    Transition,
    action_record,
    event_record,
    story,
    transition_record,
)

__all__ = ["Scheduler", "SchedulerError", "SubjobState"]

_EMPTY = IntervalSet()
_DONE = SubjobState.DONE
_RUNNING = SubjobState.RUNNING
_PARKED = SubjobState.PARKED
_STOPPING = SubjobState.STOPPING
_DONE_BIT: int = _DONE.bit  # type: ignore[attr-defined]
_SHRINKING = SubjobState.SHRINKING
VALIDATE_ENV = datasched.VALIDATE_ENV
"""Set to 1 (read once, when a scheduler is built) to validate after the events."""

validate_by_default: Callable[[], bool] = datasched.validate_from_environment
"""Whether a scheduler built without ``validate=`` validates. The core reads no environment:
the package's root (``datasched/__init__.py``) gives the reader of ``VALIDATE_ENV``."""
_CHECK_EVERY = 2
"""Validation checks the whole books (O(slots + live subjobs + jobs)) after about one event
in (slots + live subjobs + jobs) / 2, so that it costs about as much per event on a large
cluster as on a small one; the jobs an event touched are checked after it."""


class Scheduler(Commands):
    """The master's state machine; one instance per cluster and policy."""

    def __init__(
        self,
        topology: Topology,
        space: DataSpace,
        policy: Policy,
        *,
        cost: CostModel | None = None,
        min_subjob_events: int = 10,
        replicator: HotReplicator | None = None,
        validate: bool | None = None,
        trace: TraceSink | None = None,
        history: int = 0,
    ) -> None:
        """``validate``: check the books after the events (:meth:`validate`); None: when the
        environment's ``DATASCHED_VALIDATE`` is 1. ``trace``: called with each record of
        events, transitions and actions (:mod:`datasched.core.trace`). ``history``: keep
        the last so many records for :meth:`story` (0: none)."""
        if min_subjob_events < 1:
            raise ValueError(f"min_subjob_events: must be positive, got {min_subjob_events!r}")
        self.topology = topology
        self.space = space
        self.cost = cost if cost is not None else CostModel()
        self.policy = policy
        self.replicator = replicator
        """Replicates hot files beside the policy (ranganathan-foster's Dataset Scheduler)."""
        self.min_subjob_events = min_subjob_events
        self.now = 0.0
        self.jobs: dict[int, JobState] = {}
        self.job_queue: deque[int] = deque()
        """Jobs queued whole (not started), first come first served."""
        self.running: dict[int, Running] = {}
        """Slot -> the subjob running there."""
        self.directory = CacheDirectory(topology.n_nodes)
        self.completed = 0
        self.failed = 0
        self.slot_node: list[int] = []
        """Slot -> its node (read-only for policies and engines; extended as nodes join)."""
        self.node_slots: list[list[int]] = []
        """Node -> its slots."""
        self.node_running: list[int] = []
        """Node -> how many of its slots run a subjob."""
        self._nodes: list[int] = []
        self._lost: set[int] = set()
        self._idle: list[int] = []
        self._reserved: set[int] = set()
        self._rates: list[tuple[float, float, float]] = []
        for node in topology.nodes:
            self.node_slots.append(self._new_slots(node.node_id, node.slots))
            self.node_running.append(0)
            self._rates.append(self._node_rates(node.node_id))
            self._nodes.append(node.node_id)
        self._idle = [s for slots in self.node_slots for s in slots]
        self._replacements: dict[int, Subjob] = {}
        """Preempted subjob -> the subjob to start on its slot once it has stopped."""
        self._splits: dict[int, int] = {}
        """Shrinking subjob -> the reserved slot its released part starts on."""
        self._parked: set[int] = set()
        """Ids of the subjobs parked with their jobs (``JobState.suspended``)."""
        self._fetches: dict[int, list[IntervalSet]] = {}
        """Node -> what is being fetched or copied into its cache, one entry per request."""
        self._transfers = 0
        self._pins: dict[int, tuple[int, IntervalSet]] = {}
        self._pin_ids = itertools.count()
        self._wakes = 0
        """WakeAts not answered by a Tick yet."""
        self._subjob_ids: Iterator[int] = itertools.count()
        self._states: dict[int, SubjobState] = {}
        """Live subjob -> its state (DONE ones leave)."""
        self.arrivals_closed = False
        """Whether the engine said no job will arrive any more (:class:`ArrivalsClosed`)."""
        self.stimulus_id = 0
        """The id of the event being handled (or last handled): 1, 2, ... in order."""
        self._event_kind: type = type(None)
        if validate is None:
            validate = validate_by_default()
        self._validating = validate
        self._since_check = 0
        self._trace = trace
        if history < 0:
            raise ValueError(f"history: must not be negative, got {history!r}")
        self.history: deque[TraceRecord] | None = deque(maxlen=history) if history else None
        """The last records (events, transitions, actions) when ``history`` was given."""
        self._recording = trace is not None or self.history is not None
        self._observed = validate or self._recording
        self._changes: list[Transition] | None = [] if self._observed else None
        """The current event's transitions, while someone listens."""
        self.left_cpu_s: dict[int, float] = {}
        """Slot -> the CPU seconds of the subjob that last left it, where its engine measured
        them (``SubjobFinished.cpu_s``); no entry: not measured."""
        self._out: list[Action] = []
        self._freed: list[tuple[int, JobState | None]] = []
        self._by_end = None
        self._split_index = None
        self._reads = policy.reads
        all_rates = [s for rates in self._rates for s in rates]
        self.fastest_s_per_event = min(all_rates)
        """The least time per event any read can take (a bound for policies' estimates)."""
        self.slowest_s_per_event = max(all_rates)
        """The most time per event any read can take."""
        self._handlers: dict[type, Callable[[Any], None]] = {
            SubjobFinished: self._on_finished,
            SubjobShrunk: self._on_shrunk,
            JobArrived: self._on_arrived,
            SubjobStopped: self._on_stopped,
            WorkRequested: self._on_work_requested,
            CacheChanged: self._on_cache_changed,
            FetchDone: self._on_fetch_done,
            TransferDone: self._on_transfer_done,
            NodeJoined: self._on_node_joined,
            NodeLost: self._on_node_lost,
            JobCancelled: self._on_cancelled,
            Tick: self._on_tick,
            ArrivalsClosed: self._on_arrivals_closed,
        }
        # The policy's hooks at each start, looked up once: a policy that keeps the defaults
        # (no notice of starts; its ``reads`` for every subjob) costs no call per start.
        kind = type(policy)
        self._started_hook = None if kind.started is Policy.started else policy.started
        self._reads_fixed = kind.read_mode is Policy.read_mode
        policy.bind(self)

    def _new_slots(self, node: int, n: int) -> list[int]:
        first = len(self.slot_node)
        self.slot_node.extend([node] * n)
        return list(range(first, first + n))

    def _node_rates(self, node: int) -> tuple[float, float, float]:
        return self.topology.rates(node, self.cost, self.space.bytes_per_event)

    # -- the one entry point ------------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Take one event, return the actions it calls for (in the order to carry them out)."""
        at = event.time
        if at < self.now:
            raise SchedulerError(f"event at {at} is earlier than {self.now}")
        self.now = at
        self.stimulus_id += 1
        kind = type(event)
        self._event_kind = kind
        out: list[Action] = []
        self._out = out
        # The two kinds of most events called directly (compiled, C calls; a bound method
        # from the table is a call by the interpreter's protocol), the others from the table.
        # ``type(event)`` again rather than ``kind``: so mypy narrows the event's type.
        if type(event) is SubjobFinished:
            self._on_finished(event)
        elif type(event) is SubjobShrunk:
            self._on_shrunk(event)
        else:
            self._handlers[kind](event)
        if self._freed:
            self._offer_freed()
        if self.replicator is not None:
            self.replicator.observe(self, event, out)
        if not self.running and self.jobs and self._idle:
            self._check_not_stranded()
        if self._observed:
            self._observe(event, out)
        return out

    # -- validation and tracing ---------------------------------------------------------------

    @property
    def validating(self) -> bool:
        """Whether the books are checked after the events (fixed when the scheduler is built)."""
        return self._validating

    def _observe(self, event: Event, out: list[Action]) -> None:
        """After an event, with validation or recording on: record it, then check."""
        changes = self._changes
        assert changes is not None
        if self._recording:
            self._record_event(event, changes, out)
        if self._validating:
            self._since_check += 1
            size = len(self._states) + len(self.slot_node) + len(self.jobs)
            if self._since_check * _CHECK_EVERY >= size or not self.jobs:
                self._since_check = 0
                self.validate()
            else:
                self._validate_jobs({t.job for t in changes})
        changes.clear()

    def _record_event(self, event: Event, changes: list[Transition], out: list[Action]) -> None:
        job: int | None = None
        if isinstance(event, JobArrived):
            job = event.job.job_id
        elif isinstance(event, JobCancelled):
            job = event.job_id
        else:
            subjob = getattr(event, "subjob_id", None)
            job = next((t.job for t in changes if t.subjob == subjob), None)
        records = [event_record(self.stimulus_id, event, job)]
        records.extend(transition_record(t) for t in changes)
        for action in out:
            records.append(action_record(action, self._job_of_action(action)))
        for record in records:
            if self._trace is not None:
                self._trace(record)
            if self.history is not None:
                self.history.append(record)

    def _job_of_action(self, action: Action) -> int | None:
        subjob = getattr(action, "subjob", None)
        if subjob is not None:
            return int(subjob.job_id)
        job_id = getattr(action, "job_id", None)
        if job_id is not None:
            return int(job_id)
        if hasattr(action, "subjob_id"):
            r = self.running.get(action.slot)  # type: ignore[union-attr]
            return None if r is None else r.subjob.job_id
        return None

    def story(self, job_id: int) -> list[Mapping[str, Any]]:
        """Why ``job_id`` went where it went: the records of the history (``history`` must be
        given) that name the job, and the events that caused them, oldest first
        (:func:`datasched.core.trace.story`)."""
        if self.history is None:
            raise SchedulerError("story: the scheduler keeps no history (build it with history=N)")
        return story(self.history, job_id)

    def validate(self) -> None:
        """Check the whole books; raise SchedulerError naming the first broken invariant.

        Each job's live subjobs and its unissued events partition what is left of it; every
        subjob's state agrees with where it is (on a slot, parked, waiting); every slot of a
        node in the cluster is running, idle or reserved, exactly one; parked work and the
        jobs' parked lists agree; per-node counts agree with what runs; pending replacements
        and splits name subjobs that are stopping or shrinking; the cache directory's map is
        what the nodes' contents make. O(slots + live subjobs + cached extents)."""
        self._validate_slots()
        self._validate_jobs(self.jobs)
        n_live = sum(len(js.live) for js in self.jobs.values())
        if n_live != len(self._states):
            extra = sorted(set(self._states) - {i for js in self.jobs.values() for i in js.live})
            raise SchedulerError(
                f"validate: {len(self._states)} subjobs have a state but {n_live} are live "
                f"(stale states: {extra[:5]})"
            )
        parked = [sj.subjob_id for js in self.jobs.values() for sj in js.suspended]
        if len(parked) != len(set(parked)) or set(parked) != self._parked:
            raise SchedulerError(
                f"validate: parked subjobs {sorted(self._parked)[:8]} and the jobs' parked "
                f"lists {sorted(parked)[:8]} disagree"
            )
        queued = list(self.job_queue)
        if len(queued) != len(set(queued)):
            raise SchedulerError(f"validate: the job queue {queued[:8]} holds a job twice")
        for job_id in queued:
            if job_id not in self.jobs:
                raise SchedulerError(f"validate: queued job {job_id} is not in the system")
        if self._transfers != sum(len(v) for v in self._fetches.values()):
            raise SchedulerError(
                f"validate: {self._transfers} transfers counted, "
                f"{sum(len(v) for v in self._fetches.values())} in flight"
            )
        try:
            self.directory.check()
        except ValueError as e:
            raise SchedulerError(f"validate: {e}") from None
        self._validate_by_end()
        self._validate_split_index()

    def _validate_by_end(self) -> None:
        """The by-end order (once kept) is sorted and holds every settled running subjob
        with its current estimated end: what ``longest_running`` reads."""
        order = self._by_end
        if order is None:
            return
        for a, b in itertools.pairwise(order):
            if a > b:
                raise SchedulerError(f"validate: the by-end order is not sorted at {b}")
        entries = set(order)
        for slot, r in self.running.items():
            if r.settled and (r.end_s, -slot, -r.subjob.subjob_id) not in entries:
                raise SchedulerError(
                    f"validate: running subjob {r.subjob.subjob_id} on slot {slot} is missing "
                    "from the by-end order"
                )

    def _validate_slots(self) -> None:
        idle = self._idle
        for a, b in itertools.pairwise(idle):
            if a >= b:
                raise SchedulerError(f"validate: idle slots are not sorted or repeat at {b}")
        idle_set = set(idle)
        for slot, r in self.running.items():
            if r.slot != slot:
                raise SchedulerError(f"validate: slot {slot} holds the record of slot {r.slot}")
        counts = [0] * len(self.node_slots)
        for node, slots in enumerate(self.node_slots):
            lost = node in self._lost
            for slot in slots:
                where = [
                    name
                    for name, here in (
                        ("running", slot in self.running),
                        ("idle", slot in idle_set),
                        ("reserved", slot in self._reserved),
                    )
                    if here
                ]
                if lost and where:
                    raise SchedulerError(
                        f"validate: slot {slot} of lost node {node} is {' and '.join(where)}"
                    )
                if not lost and len(where) != 1:
                    raise SchedulerError(
                        f"validate: slot {slot} is {' and '.join(where) or 'none of running, '}"
                        f"{'' if where else 'idle or reserved'}"
                        f"{' at once' if where else ''}"
                    )
                if slot in self.running:
                    counts[node] += 1
        if len(counts) != len(self.node_running):
            raise SchedulerError(
                f"validate: {len(self.node_running)} nodes counted, {len(counts)} known"
            )
        if counts != self.node_running:
            pairs = zip(counts, self.node_running, strict=True)
            bad = next(n for n, (a, b) in enumerate(pairs) if a != b)
            raise SchedulerError(
                f"validate: node {bad} counts {self.node_running[bad]} running slots, "
                f"{counts[bad]} run a subjob"
            )
        all_slots = {s for slots in self.node_slots for s in slots}
        for name, some in (("running", set(self.running)), ("idle", idle_set)):
            if not some <= all_slots:
                raise SchedulerError(
                    f"validate: {name} slots {sorted(some - all_slots)} belong to no node"
                )
        if not self._reserved <= all_slots:
            raise SchedulerError(f"validate: reserved slots {sorted(self._reserved)} unknown")
        by_id = {r.subjob.subjob_id: r for r in self.running.values()}
        for subjob_id, target in self._splits.items():
            shrinking = by_id.get(subjob_id)
            if shrinking is None or not shrinking.shrinking:
                raise SchedulerError(
                    f"validate: a split is pending for subjob {subjob_id}, which is not shrinking"
                )
            if target not in self._reserved:
                raise SchedulerError(
                    f"validate: the split of subjob {subjob_id} goes to slot {target}, "
                    "which is not reserved"
                )
        if len(set(self._splits.values())) != len(self._splits):
            raise SchedulerError("validate: two pending splits go to the same slot")
        for subjob_id in self._replacements:
            stopping = by_id.get(subjob_id)
            if stopping is None or not stopping.stopping:
                raise SchedulerError(
                    f"validate: a replacement waits for subjob {subjob_id}, which is not stopping"
                )

    def _running_subjob(self, subjob_id: int) -> Running | None:
        for r in self.running.values():
            if r.subjob.subjob_id == subjob_id:
                return r
        return None

    def _validate_jobs(self, job_ids: Iterator[int] | set[int] | Mapping[int, Any]) -> None:
        """Check the books of the given jobs (those still in the system)."""
        for job_id in job_ids:
            js = self.jobs.get(job_id)
            if js is not None:
                self._validate_job(js)

    def _validate_job(self, js: JobState) -> None:
        job = js.job
        where = f"validate: job {js.job_id}"
        union = js.unissued
        total = union.length
        if not union.issubset(job.data):
            raise SchedulerError(
                f"{where}: unissued events {show_events(union - job.data)} are not its own"
            )
        on_slots: set[int] = set()
        running = self.running
        by_id = {running[s].subjob.subjob_id: running[s] for s in js.running_slots if s in running}
        for subjob_id, sj in js.live.items():
            if sj.subjob_id != subjob_id or sj.job_id != js.job_id:
                raise SchedulerError(f"{where}: live entry {subjob_id} holds {sj!r}")
            if not sj.data.issubset(job.data):
                raise SchedulerError(
                    f"{where}: subjob {subjob_id} holds events {show_events(sj.data - job.data)} "
                    "that are not the job's"
                )
            if union.overlaps(sj.data):
                raise SchedulerError(
                    f"{where}: subjob {subjob_id} overlaps its other subjobs or unissued "
                    f"events on {show_events(sj.data & union)}"
                )
            union = union | sj.data
            total += sj.data.length
            state = self._states.get(subjob_id)
            if state is None:
                raise SchedulerError(f"{where}: live subjob {subjob_id} has no state")
            if state in ON_SLOT:
                r = by_id.get(subjob_id) or self._running_subjob(subjob_id)
                if r is None:
                    raise SchedulerError(f"{where}: subjob {subjob_id} is {state.value} on no slot")
                if r.state is not state:
                    raise SchedulerError(
                        f"{where}: subjob {subjob_id} is {state.value} but its slot {r.slot} "
                        f"says {r.state.value}"
                    )
                if r.subjob != sj:
                    raise SchedulerError(
                        f"{where}: slot {r.slot} runs another copy of subjob {subjob_id}"
                    )
                on_slots.add(r.slot)
            elif (state is _PARKED) != (subjob_id in self._parked):
                raise SchedulerError(
                    f"{where}: subjob {subjob_id} is {state.value} but "
                    f"{'not ' if state is _PARKED else ''}in the parked list"
                )
        if on_slots != js.running_slots:
            raise SchedulerError(
                f"{where}: its running slots {sorted(js.running_slots)} are not the slots "
                f"its subjobs run on {sorted(on_slots)}"
            )
        for sj in js.suspended:
            if self._states.get(sj.subjob_id) is not _PARKED:
                raise SchedulerError(f"{where}: parked subjob {sj.subjob_id} is not parked")
        left = job.n_events - js.done_events
        if js.cancelled:
            if js.unissued:
                raise SchedulerError(f"{where}: cancelled, yet it has unissued events")
            if total > left:
                raise SchedulerError(
                    f"{where}: cancelled, its subjobs hold {total} events, {left} are left"
                )
        elif total != left:
            raise SchedulerError(
                f"{where}: its subjobs and unissued events hold {total} events, but "
                f"{left} are left ({job.n_events} less {js.done_events} processed)"
            )

    # -- event handlers -----------------------------------------------------------------------

    def _on_arrived(self, ev: JobArrived) -> None:
        job = ev.job
        if job.job_id in self.jobs:
            raise SchedulerError(f"job {job.job_id} arrived twice")
        if job.data and job.data.stop > self.space.n_events:
            raise SchedulerError(
                f"job {job.job_id}: events up to {job.data.stop} are beyond the data space "
                f"({self.space.n_events} events)"
            )
        if self.arrivals_closed:
            raise SchedulerError(f"job {job.job_id} arrived after arrivals were closed")
        js = JobState(job)
        self.jobs[job.job_id] = js
        if job.n_events == 0:
            self._complete(js)
            return
        self.policy.job_arrived(self, js)

    def _on_finished(self, ev: SubjobFinished) -> None:
        slot, cpu_s = ev.slot, ev.cpu_s
        # ``_left_cpu`` written out: a subjob's end is half of a job splitting run's events.
        if cpu_s is None:
            self.left_cpu_s.pop(slot, None)
        else:
            self.left_cpu_s[slot] = cpu_s
        self._subjob_left(slot, ev.subjob_id, None, ev.cache_added, ev.cache_evicted)

    def _on_stopped(self, ev: SubjobStopped) -> None:
        self._left_cpu(ev.slot, ev.cpu_s)
        self._subjob_left(ev.slot, ev.subjob_id, ev.remaining, ev.cache_added, ev.cache_evicted)

    def _left_cpu(self, slot: int, cpu_s: float | None) -> None:
        if cpu_s is None:
            self.left_cpu_s.pop(slot, None)
        else:
            self.left_cpu_s[slot] = cpu_s

    def _subjob_left(
        self,
        slot: int,
        subjob_id: int,
        remaining: IntervalSet | None,
        added: IntervalSet,
        evicted: IntervalSet,
    ) -> None:
        """Book a subjob that left ``slot``: finished (``remaining`` None) or stopped."""
        r = self.running.get(slot)
        if r is None or r.subjob.subjob_id != subjob_id:
            raise SchedulerError(f"subjob {subjob_id} is not running on slot {slot}")
        sj = r.subjob
        if remaining is None:
            remaining = _EMPTY
        elif not remaining.issubset(sj.data):
            raise SchedulerError(f"subjob {subjob_id}: remainder is not part of its data")
        was_stopping = r.state is _STOPPING
        states = self._states
        was = states.get(subjob_id)
        allowed: int = 0 if was is None else was.allowed  # type: ignore[attr-defined]
        if self._changes is None and allowed & _DONE_BIT:
            # ``_transition`` written out where nobody listens (every subjob that leaves),
            # the same check of the table.
            del states[subjob_id]
            r.state = _DONE
        else:
            self._transition(sj, _DONE, r)
        del self.running[slot]
        js = self.jobs[sj.job_id]
        del js.live[subjob_id]
        js.running_slots.discard(slot)
        js.done_events += sj.data.length - remaining.length
        node = self.slot_node[slot]
        self.node_running[node] -= 1
        # The sets' lengths, not their truth: ``IntervalSet.__bool__`` is a Python call, and
        # this runs for every subjob that leaves (docs/performance.md, "Job splitting at
        # 1,000 nodes").
        if evicted.length:
            self.directory.remove(node, evicted)
        if added.length:
            self.directory.add(node, added)
        insort(self._idle, slot)
        # A Preempt that crossed a finish still gets its replacement started.
        replacement = self._replacements.pop(subjob_id, None) if self._replacements else None
        rest_returned = remaining.length and not js.cancelled
        if rest_returned:
            rest = self._make_subjob(js, remaining, sj.cached_on, sj.preemptible)
            self.policy.work_returned(
                self, rest, Returned.PREEMPTED if was_stopping else Returned.STOPPED
            )
        if replacement is not None:
            self._start_replacement(replacement, slot)
        if js.cancelled or not js.live or js.done_events > js.job.data.length:
            self._after_subjob(js)  # (else it would do nothing: a job that goes on)
        # Nothing but a returned rest or a replacement can have taken the slot since it
        # was freed above.
        if (replacement is None and not rest_returned) or self.is_idle(slot):
            self._freed.append((slot, js))

    def _return(self, sj: Subjob, cause: Returned) -> None:
        """Hand work back to the policy. Unless the policy asked for it (a preemption, whose
        rest it places knowingly), every free slot then gets a chance at it: the policy may
        have queued it where no slot will ask."""
        self.policy.work_returned(self, sj, cause)
        if cause is not Returned.PREEMPTED:
            self._freed.extend((slot, None) for slot in self._idle)

    def _start_replacement(self, sj: Subjob, slot: int) -> None:
        js = self.jobs.get(sj.job_id)
        if js is not None and sj.subjob_id in js.live and not js.cancelled:
            self.start(sj, slot)

    def _on_shrunk(self, ev: SubjobShrunk) -> None:
        r = self.running.get(ev.slot)
        if r is None or r.subjob.subjob_id != ev.subjob_id:
            # It left the slot first (a lost worker's packets): its rest was returned then,
            # and an engine cannot release anything from it any more.
            if ev.released:
                raise SchedulerError(f"subjob {ev.subjob_id} released events after it left")
            return
        if r.state is not _SHRINKING:
            raise SchedulerError(f"subjob {ev.subjob_id} on slot {ev.slot} was not being shrunk")
        sj = r.subjob
        released = ev.released
        if not released.issubset(sj.data):
            raise SchedulerError(f"subjob {ev.subjob_id}: released events are not part of its data")
        self._transition(sj, _RUNNING, r)
        js = self.jobs[sj.job_id]
        if released.length:  # (not its truth, a Python call: see ``_subjob_left``)
            r.subjob = sj.shrunk(released)
            js.live[sj.subjob_id] = r.subjob
            r.end_s = r.start_s + r.subjob.data.length * r.s_per_event
        self._push_end(r)
        target = self._splits.pop(sj.subjob_id)
        if not released.length:
            # The estimate was off (it had been processed): no split. Not offering the
            # target again now keeps the policy from asking for the same split in a loop.
            self._release_slot(target, offer=False)
            return
        if js.cancelled:
            self._release_slot(target)
            return
        node = self.slot_node[target]
        if node in self._lost:
            rest = self._make_subjob(js, released, sj.cached_on, True)
            self._return(rest, Returned.NODE_LOST)
            return
        # The moved part keeps naming the node that caches it (its queue of origin, for
        # out-of-order scheduling), unless the target's node caches it itself.
        on_target = self.directory.covers(node, released)
        cached_on = node if on_target else sj.cached_on
        self.start(self._make_subjob(js, released, cached_on, True), target)

    def _on_work_requested(self, ev: WorkRequested) -> None:
        # A busy slot asking ahead is not modelled: one subjob a slot.
        if self.is_idle(ev.slot):
            self._freed.append((ev.slot, None))

    def _on_cache_changed(self, ev: CacheChanged) -> None:
        if ev.node in self._lost:
            return
        self.directory.remove(ev.node, ev.evicted)
        self.directory.add(ev.node, ev.added)

    def _on_fetch_done(self, ev: FetchDone) -> None:
        self._arrived(ev.node, ev.data, ev.added, ev.evicted)

    def _on_transfer_done(self, ev: TransferDone) -> None:
        self._arrived(ev.node, ev.data, ev.added, ev.evicted)

    def _arrived(
        self, node: int, data: IntervalSet, added: IntervalSet, evicted: IntervalSet
    ) -> None:
        pending = self._fetches.get(node)
        if not pending or node in self._lost:
            return  # its node was lost meanwhile: forgotten then
        try:
            pending.remove(data)
        except ValueError:
            raise SchedulerError(f"node {node}: no transfer of {data} was in flight") from None
        self._transfers -= 1
        self.directory.remove(node, evicted)
        self.directory.add(node, added)
        self.policy.data_arrived(self, node, added)

    def _on_tick(self, ev: Tick) -> None:
        if self._wakes > 0:
            self._wakes -= 1
        self.policy.tick(self)

    def _on_arrivals_closed(self, ev: ArrivalsClosed) -> None:
        if not self.arrivals_closed:
            self.arrivals_closed = True
            self.policy.arrivals_closed(self)

    def _on_node_joined(self, ev: NodeJoined) -> None:
        spec = ev.node
        node = spec.node_id
        if node < len(self.node_slots):
            if node not in self._lost:
                raise SchedulerError(f"node {node} joined while still in the cluster")
            self._lost.discard(node)
            if len(self.node_slots[node]) != spec.slots:
                self.node_slots[node] = self._new_slots(node, spec.slots)
            self.topology = self.topology.with_node(spec)
            self._rates[node] = self._node_rates(node)
        else:
            if node != len(self.node_slots):
                raise SchedulerError(f"a new node must be numbered {len(self.node_slots)}")
            self.topology = self.topology.with_node(spec)
            self.directory.add_node()
            self.node_slots.append(self._new_slots(node, spec.slots))
            self.node_running.append(0)
            self._rates.append(self._node_rates(node))
        insort(self._nodes, node)
        self.policy.node_joined(self, node)
        for slot in self.node_slots[node]:
            insort(self._idle, slot)
            self._freed.append((slot, None))

    def _on_node_lost(self, ev: NodeLost) -> None:
        """A node died: what its subjobs had not processed goes back to the policy."""
        node = ev.node
        if node in self._lost:
            return
        remaining = dict(ev.remaining)
        self._lost.add(node)
        self._nodes.remove(node)
        self.node_running[node] = 0
        returned: list[Subjob] = []
        touched: dict[int, JobState] = {}
        """Jobs that ran on the node, each once (two of its slots may run one job)."""
        for slot in self.node_slots[node]:
            i = bisect_left(self._idle, slot)
            if i < len(self._idle) and self._idle[i] == slot:
                del self._idle[i]
            self._reserved.discard(slot)
            r = self.running.pop(slot, None)
            if r is None:
                continue
            sj = r.subjob
            rest = remaining.get(slot, sj.data)
            if not rest.issubset(sj.data):
                raise SchedulerError(f"subjob {sj.subjob_id}: remainder is not part of its data")
            js = self.jobs[sj.job_id]
            self._transition(sj, _DONE, r)
            del js.live[sj.subjob_id]
            js.running_slots.discard(slot)
            js.done_events += sj.data.length - rest.length
            replacement = self._replacements.pop(sj.subjob_id, None)
            if replacement is not None:
                rjs = self.jobs.get(replacement.job_id)
                if rjs is not None and replacement.subjob_id in rjs.live:
                    returned.append(replacement)
            target = self._splits.pop(sj.subjob_id, None)
            if target is not None:
                self._release_slot(target)
            if rest and not js.cancelled:
                cached_on = None if sj.cached_on == node else sj.cached_on
                returned.append(self._make_subjob(js, rest, cached_on, False))
            touched[js.job_id] = js
        self._transfers -= len(self._fetches.pop(node, ()))
        for token in [t for t, (n, _) in self._pins.items() if n == node]:
            del self._pins[token]
        self.directory.clear(node)
        self.policy.node_lost(self, node)
        for sj in returned:
            self._return(sj, Returned.NODE_LOST)
        for js in touched.values():
            self._after_subjob(js)

    def _on_cancelled(self, ev: JobCancelled) -> None:
        js = self.jobs.get(ev.job_id)
        if js is None or js.cancelled:
            return  # done already, or unknown: nothing to cancel
        js.cancelled = True
        js.cancel_reason = ev.reason
        if js.job_id in self.job_queue:
            self.job_queue.remove(js.job_id)
        self.policy.job_cancelled(self, js)
        for sj in js.suspended:
            self._parked.discard(sj.subjob_id)
        js.suspended.clear()
        js.unissued = _EMPTY
        running = {self.running[s].subjob.subjob_id for s in js.running_slots}
        for subjob_id in [i for i in js.live if i not in running]:
            self._transition(js.live.pop(subjob_id), _DONE)
        for slot in sorted(js.running_slots):
            if self.running[slot].settled:
                self.preempt(slot)
        self._after_subjob(js)

    # -- completion ---------------------------------------------------------------------------

    def _after_subjob(self, js: JobState) -> None:
        """A cancelled job fails once nothing of it runs; a job whose events are all done
        completes. :meth:`_subjob_left` calls this only when one of these cases (or the
        error below) can apply: a change here changes its test too."""
        if js.cancelled:
            if not js.running_slots and js.job_id in self.jobs:
                del self.jobs[js.job_id]
                self.failed += 1
                self._out.append(
                    JobFailed(
                        js.job_id,
                        self.now,
                        js.cancel_reason,
                        js.done_events,
                        cause=self.stimulus_id,
                    )
                )
            return
        if not js.live and js.done_events == js.job.n_events:
            self._complete(js)
        elif js.done_events > js.job.n_events:
            raise SchedulerError(f"job {js.job_id}: more events processed than it has")

    def _complete(self, js: JobState) -> None:
        del self.jobs[js.job_id]
        self.completed += 1
        first = js.first_start_s if js.first_start_s is not None else self.now
        released = js.released_s if js.released_s is not None else -1.0
        self._out.append(JobCompleted(js.job_id, self.now, first, released, self.stimulus_id))

    # -- offering free slots ------------------------------------------------------------------

    def _offer_freed(self) -> None:
        # Slots freed while handling this event are offered to the policy one by one, after
        # the books are straight; offering may free more (a preemption answered at once).
        freed, idle, work_requested = self._freed, self._idle, self.policy.work_requested
        while freed:
            slot, ended = freed.pop(0)
            i = bisect_left(idle, slot)  # ``is_idle`` written out: once per freed slot
            if i == len(idle) or idle[i] != slot:
                continue
            work_requested(self, slot, ended)
            if self._parked and self.is_idle(slot):
                # The policy left it idle: parked work (returned, suspended) must not wait
                # for ever for a policy that does not look at it.
                self.start(self._oldest_parked(), slot)

    def _oldest_parked(self) -> Subjob:
        for js in self.jobs.values():
            if js.suspended:
                return js.suspended[0]
        raise SchedulerError("parked subjobs are counted but none is found")

    def _check_not_stranded(self) -> None:
        """Nothing runs, a slot is free, yet jobs are in the system: fine only while the
        policy waits for a wake-up, an answer or a transfer it asked for."""
        if self._wakes or self._transfers or self._replacements or self._splits:
            return
        waiting = sorted(self.jobs)[:5]
        raise SchedulerError(
            f"policy {self.policy.name or type(self.policy).__name__!r} left work stranded: "
            f"jobs {waiting} wait with {len(self._idle)} slots free and nothing running"
        )
