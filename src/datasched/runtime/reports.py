"""What a run on the cluster reports, and how the master sends its packets: per job, per
packet (PROOF keeps the same per packet), and the run as a whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from datasched.core.packets import PacketDepth

__all__ = [
    "EngineConfig",
    "EngineListener",
    "JobReport",
    "NoteSink",
    "PacketReport",
    "PacketSink",
    "PacketStat",
    "ProgressSink",
    "RunReport",
    "span",
    "tell_packet",
]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the master sends packets (the policy cuts them: :mod:`datasched.core.packets`)."""

    packets_in_flight: int = 2
    """Packets a slot has in flight at least: the next one's file is fetched while the
    current one computes."""
    max_in_flight: int = 8
    """At most: short packets (a small file's events) are queued deeper on their worker, up
    to about ``queue_s`` of work, so that the worker does not idle for the master's round
    trip after each one."""
    queue_s: float = 2.0
    """Seconds of work queued on a worker's slot when its packets are short."""
    poll_s: float = 0.25
    """How often the master checks which workers are alive."""
    max_packet_attempts: int = 3
    """A packet whose storage keeps failing (after the worker's own retries) fails its job."""
    skip_bad_files: bool = False
    """A file that cannot be read is skipped (and recorded) instead of failing its job."""

    def __post_init__(self) -> None:
        # One set of checks, PacketDepth's: queue_s positive, 1 <= packets_in_flight <= max.
        _ = self.packet_depth

    @property
    def packet_depth(self) -> PacketDepth:
        """Its packets in flight a slot, as the simulator cuts packets with them
        (:class:`~datasched.core.packets.PacketDepth`)."""
        return PacketDepth(self.packets_in_flight, self.max_in_flight, self.queue_s)


@dataclass(slots=True)
class PacketStat:
    """One packet's statistics (PROOF keeps the same per packet)."""

    job: str
    node: str
    url: str
    start: int
    stop: int
    source: str
    bytes_from_tertiary: int
    bytes_from_peer: int
    read_s: float
    compute_s: float
    bytes_read: int = 0
    """Stored bytes of the baskets the packet read (the branches its processor used)."""
    cpu_s: float = 0.0
    """CPU seconds its worker thread used."""
    t_start: float = 0.0
    """Seconds after the run's start when the packet started on its worker."""
    t_end: float = 0.0
    """Seconds after the run's start when its result reached the master."""
    nice: int | None = None
    """The nice value its worker thread computed it at (None: its policy gave none)."""
    t_slot: float | None = None
    """Seconds after the run's start when the packet got its slot on its worker (its file
    fetched, the slot's CPU free; ``t_start`` is before both); None: not known."""

    @property
    def n_events(self) -> int:
        return self.stop - self.start


@dataclass(slots=True)
class JobReport:
    """What happened to one job."""

    id: str
    events_expected: int
    events_processed: int = 0
    wall_s: float = 0.0
    wait_s: float = 0.0
    cache_hit_ratio: float = 0.0
    bytes_from_tertiary: int = 0
    output: str = ""
    status: str = "pending"
    error: str = ""
    traceback: str = ""
    """The user's traceback, when their processor raised."""
    events_skipped: int = 0
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    """Files skipped as unreadable (``--skip-bad-files``): (url, reason)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "events_expected": self.events_expected,
            "events_processed": self.events_processed,
            "wall_s": round(self.wall_s, 3),
            "wait_s": round(self.wait_s, 3),
            "cache_hit_ratio": round(self.cache_hit_ratio, 4),
            "bytes_from_tertiary": self.bytes_from_tertiary,
            "output": self.output,
            "error": self.error,
            "events_skipped": self.events_skipped,
            "skipped_files": [{"url": u, "reason": r} for u, r in self.skipped_files],
        }


@dataclass(slots=True)
class RunReport:
    """A whole run: per job, per packet, and the master's own cost."""

    policy: str
    makespan_s: float
    jobs: list[JobReport]
    packets: list[PacketStat]
    scheduling_s: float = 0.0
    """Master CPU seconds inside the core and packet cutting."""
    results: dict[str, Any] = field(default_factory=dict)
    """Each completed output's merged (post-processed) accumulator, by job id (a fileset
    job's id for the combined result of its datasets)."""
    notes: list[str] = field(default_factory=list)
    """Things to tell the user once (a full cache disk on a node, jobs a policy held back,
    each lost worker)."""
    cache_faults: dict[str, Any] = field(default_factory=dict)
    """Packets read through full cache disks and copies that failed their check, per node
    (:meth:`datasched.runtime.cachefaults.CacheFaults.as_dict`)."""
    workers: list[str] = field(default_factory=list)
    """The workers' names (the nodes), in node order."""
    workers_lost: list[dict[str, Any]] = field(default_factory=list)
    """Each time a worker vanished during the run: ``worker`` (its name), ``lost_s`` and
    ``back_s`` (seconds into the run; back None: not back before the end), the packets in
    flight written off (``packets_written_off``, ``events_written_off``) and the events that
    went back to the queue, by job (``events_requeued``)."""
    calibration: Any = None
    """What the master assumed of the cluster (a session's ``Calibration``)."""
    started_wall: float = 0.0
    """When the run began (``time.time()``; packets' ``t_start`` count from it)."""

    @property
    def events_expected(self) -> int:
        return sum(j.events_expected for j in self.jobs)

    @property
    def events_processed(self) -> int:
        return sum(j.events_processed for j in self.jobs)

    @property
    def bytes_from_tertiary(self) -> int:
        return sum(p.bytes_from_tertiary for p in self.packets)

    @property
    def cache_hit_ratio(self) -> float:
        n = sum(p.n_events for p in self.packets)
        hits = sum(p.n_events for p in self.packets if p.source == "cache")
        return hits / n if n else 0.0

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.packets)

    @property
    def skipped_files(self) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for j in self.jobs:
            for url, reason in j.skipped_files:
                seen.setdefault(url, reason)
        return list(seen.items())

    @property
    def scheduling_ms_per_packet(self) -> float:
        return 1e3 * self.scheduling_s / max(len(self.packets), 1)

    def summary(self) -> dict[str, Any]:
        return {
            "makespan_s": round(self.makespan_s, 3),
            "events_expected": self.events_expected,
            "events_processed": self.events_processed,
            "cache_hit_ratio": round(self.cache_hit_ratio, 4),
            "bytes_from_tertiary": self.bytes_from_tertiary,
            "bytes_read": self.bytes_read,
            "skipped_files": [{"url": u, "reason": r} for u, r in self.skipped_files],
            "cache_faults": self.cache_faults or {"read_through": {}, "corrupted": {}},
            "workers_lost": [dict(w) for w in self.workers_lost],
        }


def span(seconds: float) -> str:
    """A time for people: seconds under two minutes, minutes under two hours, else hours."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class ProgressSink(Protocol):
    """Where the engine reports progress (the CLI draws rich progress bars)."""

    def job_started(self, job_id: str, n_events: int) -> None: ...

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None: ...

    def job_done(self, job_id: str, status: str) -> None: ...


@dataclass(frozen=True, slots=True)
class PacketReport:
    """A packet whose result is in, as a long-lived engine reports it: entries ``[start,
    stop)`` of the file at ``url`` (numbered within the file), its statistics and the
    packet's own accumulator (not merged with any other)."""

    job: str
    url: str
    start: int
    stop: int
    stat: PacketStat
    accumulator: Any


class EngineListener(Protocol):
    """What a long-lived engine (:meth:`~datasched.runtime.engine.RuntimeEngine.serve`)
    tells its owner, from the engine's loop, in order. No packet of a job is reported after
    the job is cancelled or failed, nor after its ``job_done``."""

    def job_running(self, job: str, node: str) -> None:
        """The job's first packet was sent to ``node``."""
        ...

    def packet_done(self, packet: PacketReport) -> None: ...

    def job_done(self, job: str, status: str, error: str, traceback: str) -> None:
        """The job is over: ``completed``, ``failed`` (``error`` says why) or ``aborted``."""
        ...


@runtime_checkable
class PacketSink(Protocol):
    """A progress sink that also wants each packet's statistics as its result arrives (the
    live monitor of ``datasched run``)."""

    def packet_stat(self, stat: PacketStat) -> None: ...


@runtime_checkable
class NoteSink(Protocol):
    """A progress sink that also shows what the run does besides packets (the bars of
    ``datasched run``): jobs a policy holds back, and lines for the log."""

    def job_held(self, job_id: str, why: str) -> None:
        """The job waits on purpose: ``why`` says until when (shown by its bar)."""
        ...

    def job_released(self, job_id: str) -> None: ...

    def note(self, line: str) -> None:
        """A line to show the user now (under the bars)."""
        ...


def tell_packet(sink: ProgressSink | None, stat: PacketStat) -> None:
    """Hand ``stat`` to ``sink`` if it takes packets (a plain progress sink does not)."""
    if isinstance(sink, PacketSink):
        sink.packet_stat(stat)
