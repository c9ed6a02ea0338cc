"""The daemon's live state as a :class:`~datasched.service.contracts.ClusterSnapshot`, for the
simulator's predictions (``GET /api/v1/whatif``, each request's ETA).

* **Nodes** come from the runner (``cluster()``): their names, slots, cache capacity and the
  files their caches hold as the core knows them.
* **Rates** are measured from the packets stored so far, per node (one rate for cached,
  peer and tertiary reads: the store keeps no read source per packet): what the machine
  gave the node in wall-clock time, the events of its packets stored over the last
  :data:`WINDOW_S` seconds over the time between the first and last of them, per slot
  (with at least :data:`MIN_PACKETS` packets: this holds the waits for a core beside other
  programs, for storage and for the daemon, which CPU time does not); else over its last
  :data:`HISTORY_PACKETS` packets, however old; else the events over
  the CPU seconds its packets took; a node with no packet yet takes the predictor's default
  (docs/service-whatif.md).
* **Busy time**: the time between two packets of a node stored one after the other
  counts at most :data:`IDLE_FACTOR` times what its events take at the node's median pace
  (:func:`busy_rate`): a longer gap is the node waiting for work (the dispatcher, a queue
  empty for a while), not working, and counting it would make the node look slower than it
  is.
* **A job's cost** (:func:`job_costs`): a job's CPU per event relative to the mean of all
  packets, from its own packets, or, while it has none (a request just submitted), from the
  earlier packets of jobs with the same work (processor or command, and tree); the
  simulator charges the job the nodes' time per event with the mean CPU in it replaced by
  the job's own (:func:`job_time_per_event`).
* **Spread** (:func:`rate_spread`): how much a node's wall-clock rate moves from one run
  of packets to the next, for the ETAs' intervals.
* **Jobs** are the store's elementary jobs not yet over, each file with the entry ranges
  still to do (its events less the packets stored).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from datasched.core.intervals import IntervalSet
from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    JobState,
    NodeRates,
    NodeSnapshot,
)
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request

__all__ = [
    "IDLE_FACTOR",
    "MIN_PACKETS",
    "WINDOW_S",
    "busy_rate",
    "job_costs",
    "job_time_per_event",
    "live_snapshot",
    "rate_spread",
    "recent_packets",
    "start_costs",
    "started_rates",
    "wall_rates",
]

WINDOW_S = 60.0
"""The recent past a node's wall-clock rate is measured over (seconds)."""
MIN_PACKETS = 4
"""Packets a node must have stored in the window for a wall-clock rate."""
HISTORY_PACKETS = 16
"""A node with too few packets in the window takes its wall-clock rate from its last this
many packets, however old (a request submitted after a quiet spell)."""
CHUNK = 4
"""Consecutive packets of a node whose rate is one sample of the spread."""
MIN_RUN = 3
"""Packets of one job on a node whose span is one sample of :func:`started_rates`."""
IDLE_FACTOR = 3.0
"""A gap between two stored packets of a node counts as busy up to this many times what
the later packet's events take at the node's median pace; beyond, the node was idle."""

_OPEN = (
    JobState.PENDING.value,
    JobState.SUBMITTED.value,
    JobState.QUEUED.value,
    JobState.RUNNING.value,
)


def _nodes(cluster: Mapping[str, Any], rates: Mapping[str, float]) -> tuple[NodeSnapshot, ...]:
    nodes = []
    for n in cluster.get("nodes", ()):
        if not n.get("up", True):
            continue
        rate = rates.get(str(n["name"]))
        nodes.append(
            NodeSnapshot(
                name=str(n["name"]),
                slots=_slots(n),
                cache_bytes=int(n.get("cache_capacity_bytes") or 0),
                cached=tuple(str(u) for u in n.get("cached_urls", ())),
                rates=NodeRates(rate, rate, rate) if rate else NodeRates(),
            )
        )
    return tuple(sorted(nodes, key=lambda node: node.name))


def _slots(node: Mapping[str, Any]) -> int:
    """The runner gives ``slots_total``, and ``slots`` as what each slot runs (a list)."""
    slots = node.get("slots_total") or node.get("slots") or 1
    return max(1, len(slots) if isinstance(slots, list) else int(slots))


def _todo(n_events: int, done: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    left = IntervalSet.range(0, n_events) - IntervalSet(done)
    return tuple(left)


def _recent(store: Store, now: datetime) -> dict[str, list[tuple[float, int]]]:
    """Per node, its packets stored in the window: (stored at, in seconds; events), in
    time order."""
    return {node: [(t, n) for t, n, _ in run] for node, run in _recent_jobs(store, now).items()}


def _recent_jobs(store: Store, now: datetime) -> dict[str, list[tuple[float, int, str]]]:
    """Per node, its packets stored in the window: (stored at, in seconds; events; job), in
    time order."""
    since = now - timedelta(seconds=WINDOW_S)
    out: dict[str, list[tuple[float, int, str]]] = {}
    with store.reading() as s:
        for node, created, a, b, job in s.execute(
            select(Packet.node, Packet.created, Packet.start, Packet.stop, Packet.job_id)
            .where(Packet.created >= since)
            .order_by(Packet.created, Packet.id)
        ):
            out.setdefault(str(node), []).append(
                (_aware(created).timestamp(), int(b) - int(a), str(job))
            )
    return out


def _last(store: Store, node: str) -> list[tuple[float, int, str]]:
    """The node's last :data:`HISTORY_PACKETS` packets, however old, in time order (stored
    at, events, job): a node idle for the window keeps the wall-clock rate it last worked
    at."""
    with store.reading() as s:
        rows = s.execute(
            select(Packet.created, Packet.start, Packet.stop, Packet.job_id)
            .where(Packet.node == node)
            .order_by(Packet.created.desc(), Packet.id.desc())
            .limit(HISTORY_PACKETS)
        ).all()
    return [(_aware(c).timestamp(), int(b) - int(a), str(j)) for c, a, b, j in reversed(rows)]


def _run_rate(run: list[tuple[float, int]]) -> float | None:
    """Events per wall-clock second over a run of packets in time order: the events after
    the first over the time from the first's storing to the last's."""
    span = run[-1][0] - run[0][0]
    events = sum(n for _, n in run[1:])
    return events / span if span > 0 and events > 0 else None


def busy_rate(
    run: Sequence[tuple[float, int]],
    jobs: Sequence[str] | None = None,
    submitted: Mapping[str, float] | None = None,
) -> float | None:
    """Events per second a node had work over a run of its packets (``(stored at, events)``
    in time order; ``jobs``: each packet's job, None: each its own): the time a node had
    work is cut into the runs of consecutive packets of one job, each run's time being the
    gap since the packet before it and its own span; each run's time counts at most
    :data:`IDLE_FACTOR` times what its events take at the median pace of the runs, and never
    before its job was submitted (``submitted``: job -> seconds; the node cannot have worked
    on a job that did not exist). A node that waited for the dispatcher or for work did not
    work meanwhile: its rate is what it does while it has jobs (None: no run with events).

    Runs, not packets: a job's packets on a node come back in a burst after the start of
    its sandboxed child (docs/service-whatif.md), so the gaps between packets are not a
    pace: the gap before a job's first packet is its start, work, not a wait."""
    keys = list(jobs) if jobs is not None else [str(i) for i in range(len(run))]
    since = submitted or {}
    spans: list[tuple[float, int]] = []  # per run after the first: (its time, its events)
    last_t: float | None = None
    for i, (t, n) in enumerate(run):
        if i > 0 and keys[i] == keys[i - 1]:
            time_s, events = spans[-1] if spans else (0.0, 0)
            spans[-1:] = [(time_s + t - run[i - 1][0], events + n)]
        elif last_t is not None:
            began = max(last_t, since.get(keys[i], last_t))
            spans.append((max(t - began, 0.0), n))
        else:
            spans.append((0.0, 0))  # the first run: its gap before is not known
        last_t = t
    paces = [g / n for g, n in spans if g > 0 and n > 0]
    if not paces:
        return None
    pace = statistics.median(paces)
    busy = sum(min(g, IDLE_FACTOR * pace * n) for g, n in spans if n > 0)
    events = sum(n for g, n in spans if n > 0)
    return events / busy if busy > 0 else None


def wall_rates(
    recent: Mapping[str, Sequence[tuple[float, int]]],
    slots: Mapping[str, int],
    jobs: Mapping[str, Sequence[str]] | None = None,
    submitted: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Each node's events per wall-clock second per slot over its ``recent`` packets
    (``(stored at, events)`` in time order; ``jobs``: per node, each packet's job), where
    it has at least :data:`MIN_PACKETS`: over the time it had work (:func:`busy_rate`)."""
    out: dict[str, float] = {}
    for node, run in recent.items():
        if len(run) < MIN_PACKETS:
            continue
        rate = busy_rate(run, (jobs or {}).get(node), submitted)
        if rate is not None:
            out[node] = rate / max(slots.get(node, 1), 1)
    return out


def rate_spread(recent: Mapping[str, list[tuple[float, int]]]) -> float | None:
    """The spread of the nodes' wall-clock rates: the standard deviation of the logarithm
    of each run of :data:`CHUNK` packets' rate about its node's mean (None: fewer than two
    runs measured)."""
    deviations: list[float] = []
    for run in recent.values():
        logs = []
        for i in range(0, len(run) - CHUNK, CHUNK):
            rate = _run_rate(run[i : i + CHUNK + 1])
            if rate is not None:
                logs.append(math.log(rate))
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            deviations.extend(x - mean for x in logs)
    if len(deviations) < 2:
        return None
    return math.sqrt(statistics.fmean(d * d for d in deviations))


def work_key(work: Mapping[str, Any]) -> str:
    """What makes two jobs' events cost the same: their processor (or command) and tree."""
    what = work.get("processor") or work.get("command") or ""
    return f"{work.get('kind', '')}:{what}:{work.get('tree') or ''}"


def job_costs(
    per_job: Mapping[str, tuple[float, float]],
    keys: Mapping[str, str],
    open_jobs: Sequence[str],
) -> dict[str, float]:
    """Each open job's CPU per event over the mean of all packets' (1: as costly as the
    average event): from its own packets (``per_job``: job -> (events, CPU seconds)), else
    from those of the jobs of the same :func:`work_key` (``keys``: job -> key, for every
    job in ``per_job`` and ``open_jobs``); left out when neither has a packet."""
    events = sum(e for e, _ in per_job.values())
    cpu = sum(c for _, c in per_job.values())
    if events <= 0 or cpu <= 0:
        return {}
    mean = cpu / events
    by_key: dict[str, list[float]] = {}
    for job, (e, c) in per_job.items():
        got = by_key.setdefault(keys.get(job, ""), [0.0, 0.0])
        got[0] += e
        got[1] += c
    out: dict[str, float] = {}
    for job in open_jobs:
        e, c = per_job.get(job, (0.0, 0.0))
        if e <= 0 or c <= 0:
            e, c = by_key.get(keys.get(job, ""), (0.0, 0.0))
        if e > 0 and c > 0:
            out[job] = (c / e) / mean
    return out


def recent_packets(store: Store) -> dict[str, list[tuple[float, int]]]:
    """Per node, its packets stored in the last :data:`WINDOW_S` seconds (for
    :func:`rate_spread`)."""
    return _recent(store, datetime.now(UTC))


def live_snapshot(store: Store, cluster: Mapping[str, Any]) -> ClusterSnapshot:
    """The snapshot now: ``cluster`` is the runner's description; times are seconds since
    the oldest open request was submitted (the snapshot's ``time_s``)."""
    with store.reading() as s:
        rates = {
            str(node): float(events) / float(cpu)
            for node, events, cpu in s.execute(
                select(Packet.node, func.sum(Packet.stop - Packet.start), func.sum(Packet.cpu_s))
                .where(Packet.cpu_s > 0)
                .group_by(Packet.node)
            )
            if cpu and events
        }
        rows = s.execute(
            select(Job, Request.created)
            .join(Request, Job.request_id == Request.id)
            .where(Job.state.in_(_OPEN))
            .order_by(Request.created, Job.id)
        ).all()
        per_job = {
            str(job_id): (float(events), float(cpu))
            for job_id, events, cpu in s.execute(
                select(Packet.job_id, func.sum(Packet.stop - Packet.start), func.sum(Packet.cpu_s))
                .where(Packet.cpu_s > 0)
                .group_by(Packet.job_id)
            )
            if cpu and events
        }
        keys = {
            str(job_id): work_key(work or {})
            for job_id, work in s.execute(select(Job.id, Job.work).where(Job.id.in_(list(per_job))))
        }
        keys.update({job.id: work_key(job.work or {}) for job, _ in rows})
        done: dict[tuple[str, str], list[tuple[int, int]]] = {}
        if rows:
            ids = [job.id for job, _ in rows]
            for job_id, url, a, b in s.execute(
                select(Packet.job_id, Packet.url, Packet.start, Packet.stop).where(
                    Packet.job_id.in_(ids)
                )
            ):
                done.setdefault((job_id, url), []).append((int(a), int(b)))
        epoch = min((_aware(created) for _, created in rows), default=datetime.now(UTC))
        jobs = []
        running_since = {
            job.id: _aware(job.updated) for job, _ in rows if job.state == JobState.RUNNING.value
        }
        for job, created in rows:
            files = tuple(
                FileTodo(
                    url=f["url"],
                    n_events=int(f["n_events"]),
                    n_bytes=int(f["n_bytes"]),
                    todo=_todo(int(f["n_events"]), done.get((job.id, f["url"]), [])),
                )
                for f in job.files
            )
            jobs.append(
                JobSnapshot(
                    id=job.id,
                    request_id=job.request_id,
                    files=files,
                    submitted_s=(_aware(created) - epoch).total_seconds(),
                    priority=float(job.priority),
                    node=job.node if job.state == JobState.RUNNING.value else None,
                )
            )
    slots = {str(n["name"]): _slots(n) for n in cluster.get("nodes", ())}
    with_jobs = _recent_jobs(store, datetime.now(UTC))
    for node in slots:
        if len(with_jobs.get(node, ())) < MIN_PACKETS:
            last = _last(store, node)
            if len(last) >= MIN_PACKETS:
                with_jobs[node] = last
    recent = {node: [(t, n) for t, n, _ in run] for node, run in with_jobs.items()}
    job_of = {node: [j for _, _, j in run] for node, run in with_jobs.items()}
    rates.update(wall_rates(recent, slots, job_of, _submitted(store, job_of)))
    nodes = _nodes(cluster, rates)
    paces = {
        node: rate / max(slots.get(node, 1), 1)
        for node, rate in started_rates(with_jobs).items()
        if node in slots
    }
    starts = start_costs(with_jobs, rates, paces)
    jobs = _costed(
        jobs,
        job_costs(per_job, keys, [j.id for j in jobs]),
        per_job,
        nodes,
        started=1.0 / statistics.fmean(paces.values()) if paces else None,
        start_s=statistics.fmean(starts.values()) if starts else None,
        running_for={
            job_id: max((datetime.now(UTC) - since).total_seconds(), 0.0)
            for job_id, since in running_since.items()
        },
    )
    now = (datetime.now(UTC) - epoch).total_seconds()
    return ClusterSnapshot(time_s=max(now, 0.0), nodes=nodes, jobs=tuple(jobs))


def _submitted(store: Store, jobs: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """When each of these jobs' requests was submitted (seconds)."""
    ids = sorted({j for run in jobs.values() for j in run})
    if not ids:
        return {}
    with store.reading() as s:
        rows = s.execute(
            select(Job.id, Request.created)
            .join(Request, Job.request_id == Request.id)
            .where(Job.id.in_(ids))
        ).all()
    return {str(j): _aware(c).timestamp() for j, c in rows}


def _costed(
    jobs: list[JobSnapshot],
    relative: Mapping[str, float],
    per_job: Mapping[str, tuple[float, float]],
    nodes: Sequence[NodeSnapshot],
    started: float | None = None,
    start_s: float | None = None,
    running_for: Mapping[str, float] | None = None,
) -> list[JobSnapshot]:
    """The jobs with their seconds per event on a slot (``JobSnapshot.cpu_s_per_event``),
    from the nodes' mean time per event (wall clock where a node measured it; else the
    packets' CPU per event) and each job's :func:`job_costs` share of the mean CPU.

    Only the CPU part of a slot's time per event differs from job to job: the rest (waits
    for a core, the daemon's and Dask's round trips, opening files) is the same whatever the
    processor. So a job is charged the nodes' time per event with the mean CPU per event
    replaced by its own (:func:`job_time_per_event`), not that time scaled by its CPU share:
    where round trips are most of a packet's time, as for a light processor, a job whose few
    packets happened to take twice the CPU would otherwise be predicted twice as long.

    ``started``: the nodes' mean seconds per event a slot takes within a run of one job's
    packets (:func:`started_rates`), which leaves out what starting the job on the node
    cost. The events left of the files a job has begun (a packet of theirs is stored) are
    charged that; the files it has not begun, the nodes' time per event, start included.
    A job running (its first packet sent: ``running_for`` gives for how long) with no
    packet back yet is starting: it is charged what is left of the nodes' mean start cost
    ``start_s`` (:func:`start_costs`) and its events at the pace within a run."""
    if not relative:
        return jobs
    events = sum(e for e, _ in per_job.values())
    mean_cpu = sum(c for _, c in per_job.values()) / events
    measured = [n.rates.cached_events_per_s for n in nodes if n.rates.cached_events_per_s]
    base = 1.0 / statistics.fmean(measured) if measured else mean_cpu
    if started is not None:
        started = min(started, base)
    out = []
    for j in jobs:
        if j.id not in relative:
            out.append(j)
            continue
        cpu = mean_cpu * relative[j.id]
        fresh = job_time_per_event(base, mean_cpu, cpu)
        begun = sum(_left(f) for f in j.files if f.todo is not None and _left(f) < f.n_events)
        left = sum(_left(f) for f in j.files)
        if started is not None and left > 0:
            going = job_time_per_event(started, mean_cpu, cpu)
            since = (running_for or {}).get(j.id)
            if begun > 0:
                fresh = (begun * going + (left - begun) * fresh) / left
            elif since is not None and start_s is not None:
                fresh = max(start_s - since, 0.0) / left + going
        out.append(replace(j, cpu_s_per_event=fresh))
    return out


def _left(f: FileTodo) -> int:
    """The events of a file still to do."""
    return f.n_events if f.todo is None else sum(b - a for a, b in f.todo)


def start_costs(
    runs: Mapping[str, list[tuple[float, int, str]]],
    rates: Mapping[str, float],
    paces: Mapping[str, float],
) -> dict[str, float]:
    """Each node's seconds to start a job (per slot): a run of ``n`` events (one job's
    packets on the node, the mean over ``runs``) takes ``n / rate`` at the node's rate
    (starts included, ``rates``) and ``n / pace`` within the run (:func:`started_rates`,
    ``paces``): the start is the difference (at least 0). Nodes without both are left out."""
    out: dict[str, float] = {}
    for node, packets in runs.items():
        rate, pace = rates.get(node), paces.get(node)
        if not rate or not pace:
            continue
        by_job: dict[str, int] = {}
        for _, n, job in packets:
            by_job[job] = by_job.get(job, 0) + n
        if by_job:
            n_run = statistics.fmean(by_job.values())
            out[node] = max(n_run / rate - n_run / pace, 0.0)
    return out


def started_rates(runs: Mapping[str, list[tuple[float, int, str]]]) -> dict[str, float]:
    """Each node's events per second within runs of one job's packets (``(stored at,
    events, job)`` in time order): over every job of at least :data:`MIN_RUN` packets on
    the node, the events after its first packet over the time from its first to its last.
    A job's first packet on a node pays for starting it there (a sandboxed child loading
    the processor, docs/service-whatif.md), which its later packets do not: once a job has
    begun, what is left of it goes at this pace, not at the node's rate with the starts in
    it. Nodes without such a run are left out."""
    out: dict[str, float] = {}
    for node, packets in runs.items():
        by_job: dict[str, list[tuple[float, int]]] = {}
        for t, n, job in packets:
            by_job.setdefault(job, []).append((t, n))
        events = 0
        span = 0.0
        for run in by_job.values():
            if len(run) < MIN_RUN:
                continue
            events += sum(n for _, n in run[1:])
            span += run[-1][0] - run[0][0]
        if events > 0 and span > 0:
            out[node] = events / span
    return out


def job_time_per_event(base_s: float, mean_cpu_s: float, job_cpu_s: float) -> float:
    """A job's seconds per event on a slot: the nodes' mean ``base_s`` with the mean CPU per
    event ``mean_cpu_s`` in it replaced by the job's ``job_cpu_s``. The part of ``base_s``
    beyond the CPU is shared by every job; a base below the mean CPU (CPU-second rates, or
    a processor using more than one core) scales the job's CPU instead."""
    if mean_cpu_s <= 0:
        return base_s
    overhead = max(base_s - mean_cpu_s, 0.0)
    return overhead + job_cpu_s * min(base_s, mean_cpu_s) / mean_cpu_s


def _aware(t: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
