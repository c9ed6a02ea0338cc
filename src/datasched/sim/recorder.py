"""What a simulation measures, kept apart from the event loop that produces it.

The loop (:mod:`datasched.sim.engine`) tells the :class:`Recorder` what happened: arrivals,
wake-ups, the events each subjob processed and where it read them from, jobs completed or
failed, node failures. The recorder fills a :class:`SimRun`, which :mod:`datasched.sim.metrics`
summarises. The backlog an arrival sees and the jobs a wake-up releases are the recorder's
business too: it asks the scheduler it :meth:`~Recorder.watch` es and its policy's metrics
(:func:`~datasched.core.policy.metrics_of`), so that the loop knows nothing of a policy that
holds jobs back on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasched.core.actions import JobCompleted, JobFailed
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Source
from datasched.core.policy import PolicyMetrics, metrics_of
from datasched.core.scheduler import Scheduler

__all__ = ["JobRecordTimes", "PacketRecord", "Recorder", "Release", "SimRun"]


@dataclass(slots=True)
class JobRecordTimes:
    """When one job was submitted, first processed and completed (seconds)."""

    job_id: int
    submit_s: float
    n_events: int
    first_start_s: float = -1.0
    end_s: float = -1.0
    released_s: float = -1.0
    """When the policy let the job go (end of its period); -1: on submission."""
    busy_s: float = 0.0
    """Slot-seconds its subjobs ran (processing time x mean number of slots it held)."""
    events_processed: int = 0
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Release:
    """A release of held jobs (the end of a delaying policy's period), seen just before it."""

    time_s: float
    residual: int
    """Jobs released earlier and not finished yet: what the last periods left undone."""
    released: int
    """Held jobs let go at this instant (the period's batch)."""


@dataclass(frozen=True, slots=True)
class PacketRecord:
    """One subjob (a packet, for a pull policy) that left its slot, as PROOF's monitoring
    keeps it: where it ran, what it read and from where, how long it took."""

    job_id: int
    slot: int
    node: int
    start_s: float
    end_s: float
    events: int
    """Events processed (all of the packet's unless it was stopped)."""
    file: int
    """The data space's index of the file of its first event."""
    source: int
    """Where most of its events were read from (a :class:`Source` value)."""
    peer: int
    """The node it read from as a peer (the first, when several); -1 for none."""
    n_bytes: float
    cpu_s: float
    """CPU seconds of its events (events x the job's CPU time per event)."""
    finished: bool


@dataclass(slots=True)
class SimRun:
    """Everything one simulation measured; :mod:`datasched.sim.metrics` summarises it."""

    n_nodes: int
    jobs: list[JobRecordTimes]
    n_slots: int = 0
    events_by_source: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Events processed, per :class:`Source`, for every job."""
    measured_events_by_source: list[int] = field(default_factory=lambda: [0, 0, 0])
    """The same, counting only jobs in the measured window."""
    tertiary_bytes: float = 0.0
    """Bytes read from tertiary storage by the measured jobs' subjobs, and fetched."""
    busy_s: float = 0.0
    """Slot-seconds spent on subjobs inside the measured time window."""
    window: tuple[float, float] = (0.0, 0.0)
    backlog: list[int] = field(default_factory=list)
    """Jobs in the system just before each arrival, less those the policy holds back."""
    releases: list[Release] = field(default_factory=list)
    """Every release of held jobs at a wake-up (a period end), in time order: how many jobs
    earlier releases left unfinished, and how many were let go. Empty for policies that hold
    nothing back, and for releases on arrival (a period of zero)."""
    stopped_early: bool = False
    end_s: float = 0.0
    n_events_handled: int = 0
    scheduler_s: float = 0.0
    """Wall-clock seconds spent inside ``Scheduler.handle``: the master's own work."""
    policy_counters: dict[str, int] = field(default_factory=dict)
    """The policy's own counters at the end (e.g. how often out-of-order's fairness fired)."""
    processed: dict[int, list[IntervalSet]] | None = None
    """With ``check_conservation``: every processed piece of every job."""
    node_failures: int = 0
    transfers: int = 0
    """Fetches and replications carried out."""
    bytes_transferred: float = 0.0
    packets: list[PacketRecord] | None = None
    """With ``record_packets``: every subjob that left a slot, in the order they left."""
    master_packets: int = 0
    """Packets served by the master's queue (``CostModel.master_s_per_packet``; 0 without
    it): the packets the runtime would have cut (:mod:`datasched.sim.master`)."""

    @property
    def events_submitted(self) -> int:
        return sum(j.n_events for j in self.jobs)

    @property
    def events_processed(self) -> int:
        return sum(self.events_by_source)

    @property
    def jobs_completed(self) -> int:
        return sum(1 for j in self.jobs if j.end_s >= 0 and not j.failed)

    @property
    def jobs_failed(self) -> int:
        return sum(1 for j in self.jobs if j.failed)


class Recorder:
    """Fills a :class:`SimRun` from what the loop reports."""

    def __init__(
        self,
        jobs: list[Job],
        *,
        n_nodes: int,
        n_slots: int,
        measure: tuple[int, int],
        bytes_per_event: float | None,
        check_conservation: bool,
    ) -> None:
        lo, hi = measure
        self.measured = {j.job_id for j in jobs[lo:hi]}
        w0 = jobs[lo].submit_s if lo < hi else 0.0
        w1 = jobs[hi].submit_s if hi < len(jobs) else float("inf")
        self.times = {j.job_id: JobRecordTimes(j.job_id, j.submit_s, j.n_events) for j in jobs}
        self.run = SimRun(n_nodes=n_nodes, jobs=list(self.times.values()), n_slots=n_slots)
        self.run.window = (w0, w1)
        self._bytes_per_event = bytes_per_event
        if check_conservation:
            self.run.processed = {j.job_id: [] for j in jobs}
        self._scheduler: Scheduler | None = None
        self._metrics: PolicyMetrics | None = None
        self._held = 0
        """Jobs the policy held when the wake-up being handled came (see :meth:`tick`)."""
        self._residual = 0
        """The jobs in the system then that were not held."""
        self.ended = 0
        """Jobs completed or failed so far (progress, and ``datasched sim --max-jobs``)."""

    def watch(self, scheduler: Scheduler) -> None:
        """Count backlogs and releases from ``scheduler``'s jobs and its policy's metrics."""
        self._scheduler = scheduler
        self._metrics = metrics_of(scheduler.policy)

    def add_job(self, job: Job) -> None:
        """A job submitted during the run (a closed workload's next one), not measured."""
        rec = JobRecordTimes(job.job_id, job.submit_s, job.n_events)
        self.times[job.job_id] = rec
        self.run.jobs.append(rec)
        if self.run.processed is not None:
            self.run.processed[job.job_id] = []

    def arrival(self) -> int:
        """A job is about to arrive: record and return the backlog it sees, the jobs in the
        system less those the policy holds back on purpose (a period of delayed scheduling
        is not a queue that grows from overload)."""
        sched, metrics = self._scheduler, self._metrics
        if sched is None or metrics is None:
            return 0
        backlog = len(sched.jobs) - metrics.held_jobs()
        self.run.backlog.append(backlog)
        return backlog

    def tick(self) -> bool:
        """A wake-up is about to be handled; whether the policy holds jobs now (the end of
        a period, maybe: :meth:`ticked` then records what it released)."""
        sched, metrics = self._scheduler, self._metrics
        if sched is None or metrics is None:
            return False
        self._held = held = metrics.held_jobs()
        if held > 0:
            self._residual = len(sched.jobs) - held
        return held > 0

    def ticked(self, time_s: float) -> None:
        """The wake-up after :meth:`tick` was handled: record the jobs it released, beside
        the residual backlog (the jobs in the system that were not held)."""
        held = self._held
        if held <= 0 or self._metrics is None:
            return
        self._held = 0
        released = held - self._metrics.held_jobs()
        if released > 0:
            self.run.releases.append(Release(time_s, self._residual, released))

    def ran(
        self,
        job_id: int,
        start_s: float,
        end_s: float,
        by_source: tuple[int, int, int],
        processed: IntervalSet,
        tertiary_bytes: float | None,
    ) -> None:
        """A subjob left its slot at ``end_s`` having processed ``processed``, read from each
        source as counted (``tertiary_bytes`` when events differ in size)."""
        run = self.run
        rec = self.times[job_id]
        rec.busy_s += end_s - start_s
        rec.events_processed += processed.length
        cache, peer, tertiary = by_source
        counts = run.events_by_source
        counts[0] += cache
        counts[1] += peer
        counts[2] += tertiary
        if job_id in self.measured:
            counts = run.measured_events_by_source
            counts[0] += cache
            counts[1] += peer
            counts[2] += tertiary
            if tertiary_bytes is not None:
                run.tertiary_bytes += tertiary_bytes
        w0, w1 = run.window
        overlap = min(end_s, w1) - max(start_s, w0)
        if overlap > 0:
            run.busy_s += overlap
        if run.processed is not None:
            run.processed[job_id].append(processed)

    def completed(self, action: JobCompleted) -> None:
        rec = self.times[action.job_id]
        rec.first_start_s = action.first_start_s
        rec.released_s = action.released_s
        rec.end_s = action.time
        self.ended += 1

    def failed(self, action: JobFailed) -> None:
        rec = self.times[action.job_id]
        rec.end_s = action.time
        rec.failed = True
        self.ended += 1

    def transferred(self, n_bytes: float) -> None:
        self.run.transfers += 1
        self.run.bytes_transferred += n_bytes

    def node_failed(self) -> None:
        self.run.node_failures += 1

    def close(self, end_s: float, handled: int, scheduler_s: float) -> SimRun:
        run = self.run
        run.end_s = end_s
        run.n_events_handled = handled
        run.scheduler_s = scheduler_s
        run.policy_counters = dict(self._metrics.counters()) if self._metrics is not None else {}
        if self._bytes_per_event is not None:
            # Events of one size: counted, then sized once.
            run.tertiary_bytes += (
                run.measured_events_by_source[Source.TERTIARY] * self._bytes_per_event
            )
        w0, w1 = run.window
        run.window = (w0, min(w1, end_s))
        return run
