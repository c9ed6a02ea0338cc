"""The policy contract: what a scheduling policy sees, what it may do, and what it declares.

A policy is a subclass of :class:`Policy`. The scheduler calls its hooks (documented no-ops
below, each with the paper's words where a paper needs it); a hook reads the scheduler through
:class:`SchedulerView`, a read-only view, and acts only through the view's commands (start,
assign, preempt, split, queue, suspend, discard, wake, fetch, replicate, pin, release). The view's
collections are typed read-only, so ``mypy --strict`` refuses a policy that mutates the
scheduler's queues; the view costs nothing at run time (it is the scheduler itself).

The hooks:

* :meth:`Policy.job_arrived` - a job was submitted;
* :meth:`Policy.work_requested` - a slot is free (after a finish or a stop, when its node
  joined, or when the engine says it asks for work: the pull of PROOF's packetizers);
* :meth:`Policy.work_returned` - work comes back unprocessed (a preempted subjob's rest, a lost
  node's, a stop the engine made on its own): **it must be offered again**. The default parks
  it with its job, and the scheduler starts parked work on any slot a policy leaves idle;
* :meth:`Policy.node_joined`, :meth:`Policy.node_lost`;
* :meth:`Policy.data_arrived` - a Fetch or Replicate finished;
* :meth:`Policy.job_cancelled` - drop the job's work the policy holds;
* :meth:`Policy.tick` - a WakeAt came due;
* :meth:`Policy.arrivals_closed` - no job will arrive any more (a finite jobs file);
* :meth:`Policy.started` - a subjob started (by the policy or by a split it asked for);
* :meth:`Policy.read_mode` - how a starting subjob uses the caches.

A policy declares its parameters once (:class:`Param`): the command line, the runtime,
``datasched policies --json`` and the service build their options from that declaration, and
:func:`datasched.policies.build_policy` checks values against it. Counters the simulator's
reports want (:class:`PolicyMetrics`) are methods of :class:`Policy` with defaults (none
kept); a policy overrides those it keeps.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence, Set
from typing import ClassVar, NamedTuple, Protocol

from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Part, Subjob, Topology
from datasched.core.packets import PacketRequest, PacketSizing, default_packet_stop
from datasched.core.params import DEFAULT, Param, ParamError, check_defaults, fill_defaults

__all__ = [
    "DEFAULT",
    "CacheView",
    "ClusterView",
    "DirectoryView",
    "EstimatesView",
    "JobView",
    "Param",
    "ParamError",
    "Policy",
    "PolicyMetrics",
    "ReadMode",
    "Returned",
    "RunningView",
    "SchedulerView",
    "WorkView",
    "check_defaults",
    "fill_defaults",
    "metrics_of",
]


class Returned(enum.Enum):
    """Why work came back to the policy unprocessed."""

    PREEMPTED = "preempted"
    """The rest of a subjob the policy preempted (without a replacement claiming its slot
    being the only thing asked: the rest still needs a place)."""
    STOPPED = "stopped"
    """The engine stopped a subjob on its own (a worker restarted and lost its packets)."""
    NODE_LOST = "node lost"
    """The rest of a subjob whose node failed, or work that was waiting for that node."""


class ReadMode(NamedTuple):
    """How a started subjob uses the node caches (ponce-hersch §2.3 and §4.2)."""

    cache_fill: bool = False
    """Keep what is read from tertiary storage in the node's cache."""
    peer_reads: bool = False
    """Read data cached on another node from there instead of from tertiary storage."""
    replicate: bool = False
    """With peer reads: copy what is read from a peer into this node's cache too."""
    fill_duplicates: bool = True
    """Cache data that another node caches already."""


# -- what a policy sees -----------------------------------------------------------------------


class JobView(Protocol):
    """The master's record of one job, read-only."""

    @property
    def job(self) -> Job: ...
    @property
    def job_id(self) -> int: ...
    @property
    def done_events(self) -> int: ...
    @property
    def first_start_s(self) -> float | None: ...
    @property
    def released_s(self) -> float | None: ...
    @property
    def live(self) -> Mapping[int, Subjob]:
        """Subjobs not finished: running, stopping, waiting in a queue or parked."""
        ...

    @property
    def suspended(self) -> Sequence[Subjob]:
        """Subjobs parked with the job, first to resume first."""
        ...

    @property
    def running_slots(self) -> Set[int]: ...
    @property
    def started(self) -> bool: ...
    @property
    def remaining_events(self) -> int: ...


class RunningView(Protocol):
    """A subjob running on a slot, with the master's estimate of its pace, read-only."""

    @property
    def subjob(self) -> Subjob: ...
    @property
    def slot(self) -> int: ...
    @property
    def start_s(self) -> float: ...
    @property
    def s_per_event(self) -> float: ...
    @property
    def end_s(self) -> float: ...
    @property
    def settled(self) -> bool:
        """No Preempt or Shrink is waiting for its answer (it may be asked again)."""
        ...

    def estimated_done(self, now: float) -> int: ...
    def estimated_remaining(self, now: float) -> int: ...


class DirectoryView(Protocol):
    """Which nodes cache which events (the master's cache directory), read-only."""

    def content(self, node: int) -> IntervalSet: ...
    def cached_on(self, node: int, data: IntervalSet) -> IntervalSet: ...
    def cached_length(self, node: int, data: IntervalSet) -> int: ...
    def holders(self, start: int, stop: int) -> list[tuple[int, int, frozenset[int]]]: ...
    def by_node(self, data: IntervalSet) -> dict[int, IntervalSet]: ...


class ClusterView(Protocol):
    """The cluster now: its nodes and slots, which are free. Every policy reads it."""

    @property
    def now(self) -> float: ...
    @property
    def topology(self) -> Topology: ...
    @property
    def space(self) -> DataSpace:
        """The data: its events and files (a file's events, a file's bytes)."""
        ...

    @property
    def nodes(self) -> Sequence[int]:
        """Nodes in the cluster now (lost ones left out), lowest first."""
        ...

    @property
    def idle_slots(self) -> Sequence[int]:
        """Free slots, lowest first."""
        ...

    @property
    def slot_node(self) -> Sequence[int]:
        """Slot -> its node (what :meth:`node_of` answers, without a call: hot paths)."""
        ...

    @property
    def node_slots(self) -> Sequence[Sequence[int]]:
        """Node -> its slots."""
        ...

    @property
    def node_running(self) -> Sequence[int]:
        """Node -> how many of its slots run a subjob."""
        ...

    @property
    def arrivals_closed(self) -> bool:
        """Whether no job will arrive any more (the engine sent ArrivalsClosed)."""
        ...

    def is_idle(self, slot: int) -> bool: ...
    def is_lost(self, node: int) -> bool: ...
    def node_of(self, slot: int) -> int: ...
    def slots_of(self, node: int) -> Sequence[int]: ...


class WorkView(Protocol):
    """The jobs and where their work is. Policies that push work onto slots (the
    ponce-hersch family, co-scheduling) read the queue and what runs, and cut jobs into
    subjobs with :meth:`cut` and :meth:`split_even`; pull policies (PROOF's packetizers)
    read only :attr:`jobs` and :attr:`running`."""

    @property
    def jobs(self) -> Mapping[int, JobView]:
        """Jobs in the system (arrived, not completed), in arrival order."""
        ...

    @property
    def job_queue(self) -> Sequence[int]:
        """Jobs queued whole (not started), first come first served."""
        ...

    @property
    def running(self) -> Mapping[int, RunningView]:
        """Slot -> the subjob running there."""
        ...

    @property
    def min_subjob_events(self) -> int:
        """No cut makes a subjob shorter than this."""
        ...

    def cut(self, data: IntervalSet, n: int) -> tuple[IntervalSet, IntervalSet]:
        """``data.head(n)`` and the rest, the cut moved to a file boundary when one is near."""
        ...

    def split_even(
        self, data: IntervalSet, parts: int, min_events: int | None = None
    ) -> list[IntervalSet]: ...


class EstimatesView(Protocol):
    """The master's estimates of pace, from the cost model and what it measured: where a
    subjob would run fastest, which running subjob ends last (the policies that split a
    running subjob for a free slot), what a slot's last subjob really cost (pull policies,
    which size packets by measured speed)."""

    @property
    def cost(self) -> CostModel: ...
    @property
    def fastest_s_per_event(self) -> float: ...
    @property
    def left_cpu_s(self) -> Mapping[int, float]:
        """Slot -> the CPU seconds of the subjob that last left it, where the engine measured
        them (no entry: not measured)."""
        ...

    def s_per_event_on(self, slot: int, data: IntervalSet) -> float: ...
    def read_rates(self, slot: int) -> tuple[float, float, float]:
        """Seconds per event on ``slot``'s node from its cache, a peer's, tertiary storage
        (the cost model's CPU time; what ``s_per_event_on`` weighs for uniform events)."""
        ...

    def longest_running(self) -> int | None: ...
    def split_candidates(self, content: IntervalSet) -> tuple[list[int], list[int]]:
        """``(cached, leaders)``: every settled running subjob whose data overlaps
        ``content``, and per pace the others that may have the most events left."""
        ...


class CacheView(Protocol):
    """What the node caches hold and what is on its way there: the policies that place work
    by its cached data, and those that move data themselves (co-scheduling, hot-file
    replication)."""

    @property
    def directory(self) -> DirectoryView: ...
    def fetching(self, node: int) -> IntervalSet:
        """Events being fetched or copied into ``node``'s cache now."""
        ...


class SchedulerView(ClusterView, WorkView, EstimatesView, CacheView, Protocol):
    """What a policy reads of the scheduler (the four read-only views it joins), and the
    commands it acts through. The scheduler is one; a policy's hooks get it typed as this."""

    # -- commands ---------------------------------------------------------------------------
    # Making and placing work. ``assign`` is the pull policies': it hands a slot a packet of a
    # subjob that stays in the policy's hands.
    def new_subjob(
        self,
        js: JobView,
        data: IntervalSet,
        *,
        cached_on: int | None = None,
        preemptible: bool = False,
    ) -> Subjob: ...
    def resplit(self, sj: Subjob, parts: Sequence[IntervalSet | Part]) -> list[Subjob]:
        """Replace a waiting subjob by subjobs over ``parts``, which must cover it exactly."""
        ...

    def start(self, sj: Subjob, slot: int) -> None: ...
    def assign(self, sj: Subjob, slot: int) -> None: ...
    def preempt(self, slot: int, replacement: Subjob | None = None) -> None: ...
    def split_running(
        self,
        slot: int,
        target: int,
        pick: Callable[[IntervalSet], IntervalSet] | None = None,
    ) -> bool: ...

    # The scheduler's queue and parked work, and the policy's own books.
    def queue_job(self, js: JobView) -> None: ...
    def pop_queued_job(self) -> JobView | None: ...
    def suspend(self, sj: Subjob, *, front: bool = True) -> None: ...
    def discard(self, sj: Subjob) -> None: ...
    def note_held(self, js: JobView, until: float) -> None: ...
    def note_released(self, js: JobView) -> None: ...
    def wake_at(self, time: float) -> None: ...

    # Moving data between caches (co-scheduling, hot-file replication).
    def fetch(self, node: int, data: IntervalSet, source: int | None = None) -> None: ...
    def replicate(self, source: int, node: int, data: IntervalSet) -> None: ...
    def pin(self, node: int, data: IntervalSet) -> int: ...
    def release_pin(self, node: int, token: int) -> None: ...


# -- the policy -------------------------------------------------------------------------------


class Policy:
    """Base class of scheduling policies; subclasses implement a paper's table.

    Every hook is a documented no-op or a safe default. ``reads`` says how started subjobs
    use the node caches unless :meth:`read_mode` says otherwise. ``params`` declares the
    constructor's keyword parameters, and holds their defaults: the constructor writes
    ``= DEFAULT`` and gets the declared default when the parameter is not given
    (:func:`register` checks names and defaults).
    """

    name: ClassVar[str] = ""
    section: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    reads: ReadMode = ReadMode()
    packet_sizing: PacketSizing = PacketSizing()
    """The default packetizer's settings (an engine's user may set them per run)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Each subclass's constructor takes the defaults of its declared parameters from
        ``params`` (see :data:`DEFAULT`)."""
        super().__init_subclass__(**kwargs)
        fill_defaults(cls, cls.params)

    def bind(self, sched: SchedulerView) -> None:
        """Called once, when the scheduler is created."""

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        """A job was submitted. Default: queue it whole."""
        sched.queue_job(js)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        """``slot`` is free and nothing claimed it. ``ended`` is the job whose subjob just
        left the slot (None when there was none, or it is unknown), still in ``sched.jobs``
        unless that was its last subjob. A slot the policy leaves idle gets parked work (the
        default of :meth:`work_returned`) from the scheduler, if there is any."""

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        """``sj`` came back unprocessed (see :class:`Returned`) and must be offered again.
        Default: park it first in its job's suspended subjobs."""
        sched.suspend(sj, front=True)

    def node_joined(self, sched: SchedulerView, node: int) -> None:
        """``node`` joined (or came back, its cache empty); its slots are offered next."""

    def node_lost(self, sched: SchedulerView, node: int) -> None:
        """``node`` is gone. Called before its subjobs' rests are returned: a policy that
        keeps work for that node (a queue of its cached data) gives it back now, with
        :meth:`work_returned` or a queue of its own that other nodes serve."""

    def data_arrived(self, sched: SchedulerView, node: int, data: IntervalSet) -> None:
        """A Fetch or Replicate into ``node`` finished; ``data`` is what arrived."""

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        """``js`` was cancelled: forget its work the policy holds in its own queues (the
        scheduler drops its running, parked and queued work itself)."""

    def tick(self, sched: SchedulerView) -> None:
        """A WakeAt this policy asked for came due."""

    def arrivals_closed(self, sched: SchedulerView) -> None:
        """No job will arrive any more (the engine ran a finite list of jobs and submitted
        its last). A policy that holds jobs back waiting for others to gather (delayed
        scheduling) lets them go now, since none will join them. Default: nothing."""

    def started(self, sched: SchedulerView, sj: Subjob, slot: int) -> None:
        """``sj`` was just started on ``slot`` (by the policy or by a split it asked for)."""

    def read_mode(self, sched: SchedulerView, sj: Subjob, slot: int) -> ReadMode:
        """How ``sj``, starting on ``slot``, uses the caches. Default: :attr:`reads`."""
        return self.reads

    def packet_stop(self, req: PacketRequest) -> int:
        """Where the next packet of a slot's work ends, for engines that stream work as
        packets (:mod:`datasched.core.packets`). Default: an ``Assign`` is the packet (cut at
        its file's end); a started subjob is cut by the default packetizer."""
        return default_packet_stop(self.packet_sizing, req)

    def packet_nice(self, job_id: int) -> int | None:
        """The OS priority (a nice value) at which an engine with real processes runs the
        packets of ``job_id``, where the OS allows it. Default: None (left as it is)."""
        return None

    # -- metrics (PolicyMetrics): what the simulator's reports ask; override what differs ----

    def counters(self) -> dict[str, int]:
        """How often the policy's special rules fired, by name. Default: none."""
        return {}

    def held_jobs(self) -> int:
        """Jobs the policy holds back on purpose now (delayed scheduling's current period):
        not part of a queue that grows from overload. Default: 0."""
        return 0

    def max_delay_s(self) -> float:
        """The longest time the policy holds a job back on purpose. Default: 0."""
        return 0.0


class PolicyMetrics(Protocol):
    """What the simulator's reports ask a policy. :class:`Policy` answers with defaults (no
    counters, nothing held, no delay); a policy overrides only what it keeps."""

    def counters(self) -> dict[str, int]: ...
    def held_jobs(self) -> int: ...
    def max_delay_s(self) -> float: ...


def metrics_of(policy: Policy) -> PolicyMetrics:
    """The policy's metrics: the policy itself, every policy having the defaults."""
    return policy
