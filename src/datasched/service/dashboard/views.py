"""What the dashboard shows, read from the store and the runner into plain rows: the
cluster's nodes (slots, cache fill, what each runs), the queue (elementary jobs by state),
the caller's requests with their progress, and one request's jobs and packets with their
statistics. No HTML here: the templates draw these rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from datasched.service.contracts import JobState
from datasched.service.store import ops
from datasched.service.store.models import Job, Packet, Request

__all__ = [
    "PLOT_POINTS",
    "EtaLookup",
    "JobRow",
    "NodeRow",
    "PacketRow",
    "PacketStats",
    "Progress",
    "RequestPackets",
    "RequestRow",
    "command_run",
    "eta_text",
    "job_rows",
    "node_rows",
    "queue_counts",
    "request_packets",
    "request_progress",
    "request_rows",
]

QUEUE_ORDER = tuple(JobState)
"""The states in the order the queue lists them (waiting, running, then final)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Events done of the events to do; ``percent`` is 0–100 (100 for nothing to do)."""

    events: int
    events_total: int
    packets: int = 0
    n_bytes: int = 0
    cpu_s: float = 0.0
    command: bool = False
    """A command's (STAR's): no events in packets to count; its bar says its state."""

    @property
    def percent(self) -> float:
        if self.events_total <= 0:
            return 100.0
        return min(100.0, 100.0 * self.events / self.events_total)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node as the runner reports it: its slots (busy of total), its cache fill (0–1, or
    None when the runner does not say), the jobs it runs that the viewer may see by id,
    the files its cache holds (None when not said), and how many busy slots run jobs the
    viewer may not see (other users')."""

    name: str
    up: bool
    slots_busy: int
    slots_total: int
    cache_fill: float | None
    running: tuple[str, ...]
    cached_files: int | None = None
    hidden: int = 0


@dataclass(frozen=True, slots=True)
class RequestRow:
    """A request in the list: its summary, its progress and its ETA in words."""

    id: str
    owner: str
    title: str
    state: str
    final: bool
    created: datetime
    progress: Progress
    eta: str = "—"


@dataclass(frozen=True, slots=True)
class JobRow:
    """An elementary job of a request: where it runs, its state and its progress."""

    id: str
    index: int
    node: str | None
    state: str
    n_files: int
    failed_file: str | None
    progress: Progress
    run: ops.CommandRun | None = None
    """A command's job: when it started and ended, its exit status (None: a processor's)."""


@dataclass(frozen=True, slots=True)
class PacketRow:
    """A packet done: its job, its file's entries ``[start, stop)``, where it ran, what it
    read and cost, and when it was stored (seconds after the request's first packet)."""

    job_index: int
    url: str
    start: int
    stop: int
    node: str
    n_bytes: int
    cpu_s: float
    at_s: float

    @property
    def events(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True, slots=True)
class PacketStats:
    """A request's packets in numbers: how many, their sizes in events (smallest, mean,
    largest), the bytes read, the CPU seconds, events per CPU second, and the span in
    seconds from the first packet stored to the last."""

    count: int
    events_min: int
    events_mean: float
    events_max: int
    n_bytes: int
    cpu_s: float
    events_per_cpu_s: float | None
    span_s: float


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def node_rows(view: Mapping[str, Any]) -> list[NodeRow]:
    """The nodes of a runner's cluster view. Two shapes are read: the runtime's (``slots``
    a list of ``{slot, job}``, ``slots_total``, ``cached_bytes`` of
    ``cache_capacity_bytes``, ``cached_files``) and a plain one (``slots`` a count, ``cache_fill``,
    ``running`` a list of job ids); either as :func:`~datasched.service.visibility.cluster_view`
    shows it to an ordinary user (a slot ``busy`` with no job, ``slots_busy``)."""
    rows = []
    for node in view.get("nodes") or []:
        if not isinstance(node, Mapping):
            continue
        slots = node.get("slots")
        running: list[str] = [str(j) for j in node.get("running") or []]
        busy = len(running)
        if isinstance(slots, list):
            taken = [s for s in slots if isinstance(s, Mapping) and (s.get("job") or s.get("busy"))]
            running += [str(s["job"]) for s in taken if s.get("job")]
            busy += len(taken)
            total = _int(node.get("slots_total"), len(slots))
        else:
            total = _int(slots)
        busy = max(busy, _int(node.get("slots_busy")))
        fill = node.get("cache_fill")
        capacity = _int(node.get("cache_capacity_bytes"))
        if fill is None and capacity > 0 and "cached_bytes" in node:
            fill = _int(node.get("cached_bytes")) / capacity
        rows.append(
            NodeRow(
                name=str(node.get("name", "?")),
                up=bool(node.get("up", True)),
                slots_busy=busy,
                slots_total=max(total, busy),
                cache_fill=min(1.0, max(0.0, float(fill))) if fill is not None else None,
                running=tuple(running),
                cached_files=_int(node["cached_files"]) if "cached_files" in node else None,
                hidden=busy - len(running),
            )
        )
    return rows


def queue_counts(s: Session) -> list[tuple[str, int]]:
    """Elementary jobs by state, every state listed (0 where none)."""
    counts = dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
    return [(str(state), int(counts.get(state.value, 0))) for state in QUEUE_ORDER]


def _events_total(job: Job) -> int:
    return sum(int(f["n_events"]) for f in job.files)


def _job_rows(s: Session, jobs: Sequence[Job]) -> list[JobRow]:
    done = ops.progress(s, [j.id for j in jobs])
    ran_on = ops.packet_nodes(s, [j.id for j in jobs])
    runs = ops.command_runs(s, jobs)
    return [
        JobRow(
            id=j.id,
            index=j.index,
            node=ops.job_node(j, ran_on[j.id])[0],
            state=j.state,
            n_files=len(j.files),
            failed_file=j.failed_file,
            progress=Progress(
                events=int(done[j.id]["events"]),
                events_total=_events_total(j),
                packets=int(done[j.id]["packets"]),
                n_bytes=int(done[j.id]["bytes"]),
                cpu_s=float(done[j.id]["cpu_s"]),
                command=j.id in runs,
            ),
            run=runs.get(j.id),
        )
        for j in jobs
    ]


def job_rows(s: Session, req: Request) -> list[JobRow]:
    """The request's elementary jobs, in order, with their progress."""
    return _job_rows(s, req.jobs)


def request_progress(jobs: Sequence[JobRow]) -> Progress:
    """A request's progress: the sum of its jobs'."""
    return Progress(
        events=sum(j.progress.events for j in jobs),
        events_total=sum(j.progress.events_total for j in jobs),
        packets=sum(j.progress.packets for j in jobs),
        n_bytes=sum(j.progress.n_bytes for j in jobs),
        cpu_s=sum(j.progress.cpu_s for j in jobs),
        command=bool(jobs) and all(j.progress.command for j in jobs),
    )


def command_run(jobs: Sequence[JobRow]) -> ops.CommandRun | None:
    """A command's request as one run: its jobs' first start, their last end once all
    ended, and the exit status when they all say one (the worst: a failure's); None for a
    processor's request."""
    runs = [j.run for j in jobs if j.run is not None]
    if not jobs or len(runs) < len(jobs):
        return None
    starts = [r.started for r in runs if r.started is not None]
    ends = [r.ended for r in runs if r.ended is not None]
    codes = [r.exit_code for r in runs if r.exit_code is not None]
    failed = [c for c in codes if c != 0]
    return ops.CommandRun(
        min(starts) if starts else None,
        max(ends) if len(ends) == len(runs) else None,
        failed[0] if failed else 0 if len(codes) == len(runs) else None,
    )


EtaLookup = Callable[[str], Mapping[str, Any] | None]
"""A request's ETA by its id, as the daemon's ETA watch gives it (None: not predicted)."""


def eta_text(eta: Mapping[str, Any] | None) -> str:
    """An ETA in words: the seconds left while the request runs; once it ended, how far its
    first prediction was from the end; a dash when never predicted."""
    if not eta:
        return "—"
    left, error = eta.get("seconds_left"), eta.get("error_at_submission_s")
    if left is not None:
        return f"{left:.0f} s left"
    if error is not None:  # error = predicted finish - actual finish
        return f"ended {abs(error):.1f} s {'before' if error >= 0 else 'after'} its first ETA"
    return "—"


def request_rows(
    s: Session, requests: Sequence[Request], eta: EtaLookup | None = None
) -> list[RequestRow]:
    """The requests with their progress (read in two queries whatever their number: the
    list is refreshed every second) and, given the daemon's ``eta``, their ETAs."""
    ids = [r.id for r in requests]
    jobs: dict[str, list[Job]] = {i: [] for i in ids}
    if ids:
        for job in s.scalars(select(Job).where(Job.request_id.in_(ids)).order_by(Job.index)):
            jobs[job.request_id].append(job)
    rows = {j.id: j for j in _job_rows(s, [j for group in jobs.values() for j in group])}
    return [
        RequestRow(
            id=r.id,
            owner=r.owner.name,
            title=r.title,
            state=r.state,
            final=JobState(r.state).final,
            created=r.created,
            progress=request_progress([rows[j.id] for j in jobs[r.id]]),
            eta=eta_text(eta(r.id)) if eta is not None else "—",
        )
        for r in requests
    ]


@dataclass(frozen=True, slots=True)
class RequestPackets:
    """What the request page shows of a request's packets, read in bounded size whatever
    their number (a request over thousands of files has hundreds of thousands, and the page
    is read again every second while it is open): their statistics (aggregates in the
    store), the newest ``shown`` of them, and at most ``points`` samples of the events done
    over time, each ``(seconds after the first packet, events done by then)``: the curve
    at the last packet of each of at most ``points`` runs of packets stored one after
    another."""

    stats: PacketStats
    newest: list[PacketRow]
    progress: list[tuple[float, int]]


PLOT_POINTS = 400
"""The most samples of a request's progress the plot draws (a step a packet up to it)."""


def request_packets(
    s: Session, req: Request, *, shown: int, points: int = PLOT_POINTS
) -> RequestPackets | None:
    """The request's packets as :class:`RequestPackets` (None: no packet yet)."""
    index = {j.id: j.index for j in req.jobs}
    if not index:
        return None
    mine = Packet.job_id.in_(list(index))
    events = Packet.stop - Packet.start
    count, e_min, e_sum, e_max, n_bytes, cpu, first, last, lo, hi = s.execute(
        select(
            func.count(),
            func.min(events),
            func.sum(events),
            func.max(events),
            func.sum(Packet.n_bytes),
            func.sum(Packet.cpu_s),
            func.min(Packet.created),
            func.max(Packet.created),
            func.min(Packet.id),
            func.max(Packet.id),
        ).where(mine)
    ).one()
    if not count:
        return None
    first = _as_datetime(first)
    cpu = float(cpu or 0.0)
    stats = PacketStats(
        count=int(count),
        events_min=int(e_min),
        events_mean=int(e_sum) / int(count),
        events_max=int(e_max),
        n_bytes=int(n_bytes or 0),
        cpu_s=cpu,
        events_per_cpu_s=int(e_sum) / cpu if cpu > 0 else None,
        span_s=(_as_datetime(last) - first).total_seconds(),
    )
    # In the order they were stored: by id, which the store gives in that order (the key's
    # index serves the newest at once, where ordering by time sorted them all).
    newest = s.execute(
        select(
            Packet.job_id,
            Packet.url,
            Packet.start,
            Packet.stop,
            Packet.node,
            Packet.n_bytes,
            Packet.cpu_s,
            Packet.created,
        )
        .where(mine)
        .order_by(Packet.id.desc())
        .limit(shown)
    ).all()
    rows = [
        PacketRow(
            job_index=index[r.job_id],
            url=r.url,
            start=int(r.start),
            stop=int(r.stop),
            node=r.node,
            n_bytes=int(r.n_bytes),
            cpu_s=float(r.cpu_s),
            at_s=(_as_datetime(r.created) - first).total_seconds(),
        )
        for r in reversed(newest)
    ]
    # The events done over time: the packets in at most ``points`` runs of consecutive ids,
    # summed in the store (one pass, no sort), each run ending at its last packet's time.
    width = max(1, -(-(int(hi) - int(lo) + 1) // points))
    run = (Packet.id - int(lo)) // width
    runs = s.execute(
        select(run, func.max(Packet.created), func.sum(events))
        .where(mine)
        .group_by(run)
        .order_by(run)
    ).all()
    progress: list[tuple[float, int]] = []
    done = 0
    for _, at, n in runs:
        done += int(n)
        progress.append(((_as_datetime(at) - first).total_seconds(), done))
    return RequestPackets(stats, rows, progress)


def _as_datetime(value: Any) -> datetime:
    """A time the store gave back, aware: a datetime, or SQLite's text of one from an
    aggregate (naive ones are UTC)."""
    at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
