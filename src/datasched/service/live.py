"""The daemon's live state as a :class:`~datasched.service.contracts.ClusterSnapshot`, for the
simulator's predictions (``GET /api/v1/whatif``, each request's ETA).

* **Nodes** come from the runner (``cluster()``): their names, slots, cache capacity and the
  files their caches hold as the core knows them.
* **Rates** are each node's events per wall-clock second per slot, measured from the packets
  stored so far (:mod:`datasched.service.live_rates`: busy time, spread, the pace within a
  job's run and a job's start; one rate for cached, peer and tertiary reads: the store keeps
  no read source per packet), else the events over the CPU seconds its packets took; a node
  with no packet yet takes the predictor's default (docs/service-whatif.md).
* **A job's cost** (:func:`job_costs`): a job's CPU per event relative to the mean of all
  packets, from its own packets, or, while it has none (a request just submitted), from the
  earlier packets of jobs with the same work (processor or command, and tree); the
  simulator charges the job the nodes' time per event with the mean CPU in it replaced by
  the job's own (:func:`job_time_per_event`). A job begun is charged its files' runs,
  measured from when their packets got the slot on the worker (:func:`_costed`).
* **Jobs** are the store's elementary jobs not yet over, each file with the entry ranges
  still to do (its events less the packets stored).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
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
from datasched.service.live_rates import (
    IDLE_FACTOR,
    MIN_PACKETS,
    WINDOW_S,
    busy_rate,
    cycle_paces,
    last_packets,
    rate_spread,
    recent_jobs,
    recent_sent,
    sent_paces,
    start_costs,
    started_rates,
    stored_events,
    wall_rates,
    warm_runs,
)
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request, User
from datasched.service.warm_sandboxes import starting_sandboxes, warm_sandboxes

# The rate estimation lives in live_rates; its names stay importable from here.
__all__ = [
    "IDLE_FACTOR",
    "MIN_PACKETS",
    "WINDOW_S",
    "busy_rate",
    "job_costs",
    "job_time_per_event",
    "live_snapshot",
    "rate_spread",
    "start_costs",
    "started_rates",
    "wall_rates",
]

OVERDUE_SHARE = 0.25
"""A file begun past what its run should take is charged this share of its whole run (or
its events left at the run's pace, if less): its packets are under way and due, not begun
again, and a run past the median has about a quarter of one left (measured in
docs/service-whatif.md)."""

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


def _in_flight(cluster: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(job, file) pairs with packets out on a worker now, from what the runner says each
    slot runs (``files_in_flight``)."""
    out: set[tuple[str, str]] = set()
    for n in cluster.get("nodes", ()):
        slots = n.get("slots")
        for slot in slots if isinstance(slots, list) else ():
            job = slot.get("job")
            if job is not None:
                out.update((str(job), str(url)) for url in slot.get("files_in_flight", ()))
    return out


def _placed(cluster: Mapping[str, Any]) -> dict[str, tuple[str, float | None]] | None:
    """Each job in a slot now: the node it runs on there and since when its subjob has had
    the slot (POSIX seconds, ``since``; None: not said), from the runner's view; None where
    the runner does not say what its slots run.

    The store keeps the node a job was sent to first. Between two files a job waits in the
    runner's queue, in no slot, and out-of-order may send its next file to another node,
    where its user's sandbox may be cold (docs/service-whatif.md, "Where a running job
    really is")."""
    nodes = cluster.get("nodes", ())
    if not any(isinstance(n.get("slots"), list) for n in nodes):
        return None
    out: dict[str, tuple[str, float | None]] = {}
    for n in nodes:
        slots = n.get("slots")
        for slot in slots if isinstance(slots, list) else ():
            job = slot.get("job")
            if job is not None and str(job) not in out:
                since = slot.get("since")
                out[str(job)] = (str(n["name"]), float(since) if since is not None else None)
    return out


def _node_now(job: Job, placed: Mapping[str, tuple[str, float | None]] | None) -> str | None:
    """The node a job runs on now: where a slot runs it (``placed``, :func:`_placed`); a job
    the store says is running but in no slot waits for its next file's node, as a queued
    job does (None); where the runner does not say, the store's node."""
    if job.state != JobState.RUNNING.value:
        return None
    if placed is None:
        return job.node
    got = placed.get(job.id)
    return got[0] if got is not None else None


def _slots(node: Mapping[str, Any]) -> int:
    """The runner gives ``slots_total``, and ``slots`` as what each slot runs (a list)."""
    slots = node.get("slots_total") or node.get("slots") or 1
    return max(1, len(slots) if isinstance(slots, list) else int(slots))


def _todo(n_events: int, done: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    left = IntervalSet.range(0, n_events) - IntervalSet(done)
    return tuple(left)


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
        found = s.execute(
            select(Job, Request.created, User.name)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .where(Job.state.in_(_OPEN))
            .order_by(Request.created, Job.id)
        ).all()
        rows = [(job, created) for job, created, _ in found]
        owners = {job.id: str(name) for job, _, name in found}
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
        began: dict[str, dict[str, float]] = {}
        stored: set[tuple[str, str]] = set()
        """(job, node) pairs with a packet stored."""
        if rows:
            ids = [job.id for job, _ in rows]
            for job_id, url, a, b, slotted, started, on in s.execute(
                select(
                    Packet.job_id,
                    Packet.url,
                    Packet.start,
                    Packet.stop,
                    Packet.slotted,
                    Packet.started,
                    Packet.node,
                ).where(Packet.job_id.in_(ids))
            ):
                done.setdefault((job_id, url), []).append((int(a), int(b)))
                stored.add((str(job_id), str(on)))
                at = slotted if slotted is not None else started
                if at is not None:
                    t = _aware(at).timestamp()
                    firsts = began.setdefault(str(job_id), {})
                    firsts[str(url)] = min(firsts.get(str(url), t), t)
        epoch = min((_aware(created) for _, created in rows), default=datetime.now(UTC))
        jobs = []
        running_since = {
            job.id: _aware(job.updated) for job, _ in rows if job.state == JobState.RUNNING.value
        }
        flying = _in_flight(cluster)
        placed = _placed(cluster)
        for job, created in rows:
            files = tuple(
                FileTodo(
                    url=f["url"],
                    n_events=int(f["n_events"]),
                    n_bytes=int(f["n_bytes"]),
                    todo=_todo(int(f["n_events"]), done.get((job.id, f["url"]), [])),
                    under_way=(job.id, f["url"]) in flying,
                )
                for f in job.files
            )
            jobs.append(
                JobSnapshot(
                    id=job.id,
                    request_id=job.request_id,
                    files=files,
                    submitted_s=(_aware(created) - epoch).total_seconds(),
                    user=owners.get(job.id, ""),
                    priority=float(job.priority),
                    node=_node_now(job, placed),
                )
            )
    slots = {str(n["name"]): _slots(n) for n in cluster.get("nodes", ())}
    with_jobs = recent_jobs(store, datetime.now(UTC))
    for node in slots:
        if len(with_jobs.get(node, ())) < MIN_PACKETS:
            last = last_packets(store, node)
            if len(last) >= MIN_PACKETS:
                with_jobs[node] = last
    recent = stored_events(with_jobs)
    job_of = {node: [j for _, _, j in run] for node, run in with_jobs.items()}
    rates.update(wall_rates(recent, slots, job_of, _submitted(store, job_of)))
    nodes = _nodes(cluster, rates)
    paces = {
        node: rate / max(slots.get(node, 1), 1)
        for node, rate in started_rates(with_jobs).items()
        if node in slots
    }
    starts = start_costs(with_jobs, rates, paces)
    warm = warm_sandboxes(store)
    runs = recent_sent(store, datetime.now(UTC))
    warm_only = warm_runs(runs, warm.cold)
    sent = {node: rate for node, rate in sent_paces(warm_only).items() if node in slots}
    run_jobs = {node: [p[3] for p in packets] for node, packets in runs.items()}
    cycles = cycle_paces(runs, _submitted(store, run_jobs), warm.cold)
    cycles = {node: rate for node, rate in cycles.items() if node in slots}
    now_s = datetime.now(UTC).timestamp()
    running_for = {
        job_id: max((datetime.now(UTC) - since).total_seconds(), 0.0)
        for job_id, since in running_since.items()
    }
    slot_age = {  # how long each job in a slot has had it, as the runner says
        job_id: max(now_s - since, 0.0)
        for job_id, (_, since) in (placed or {}).items()
        if since is not None
    }
    jobs = _costed(
        jobs,
        job_costs(per_job, keys, [j.id for j in jobs]),
        per_job,
        nodes,
        started=1.0 / statistics.fmean(paces.values()) if paces else None,
        start_s=statistics.fmean(starts.values()) if starts else None,
        running_for=running_for,
        sent=1.0 / statistics.fmean(sent.values()) if sent else None,
        cycle=1.0 / statistics.fmean(cycles.values()) if cycles else None,
        file_age={
            job_id: {url: max(now_s - t, 0.0) for url, t in files.items()}
            for job_id, files in began.items()
        },
        slot_age=slot_age,
    )
    nodes = tuple(replace(n, warm_users=warm.users.get(n.name, ())) for n in nodes)
    on_node_for = dict(running_for)
    on_node_for.update((j, age) for j, age in slot_age.items() if j in on_node_for)
    starting, nodes = starting_sandboxes(
        jobs, nodes, warm.setup_s, on_node_for, stored, warm.starts
    )
    now = (datetime.now(UTC) - epoch).total_seconds()
    return ClusterSnapshot(
        time_s=max(now, 0.0), nodes=nodes, jobs=starting, user_setup_s=warm.setup_s
    )


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
    sent: float | None = None,
    file_age: Mapping[str, Mapping[str, float]] | None = None,
    cycle: float | None = None,
    slot_age: Mapping[str, float] | None = None,
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
    Where no file's run is measured (``sent`` None), a job running (its first packet sent:
    ``running_for`` gives for how long) with no packet back yet is starting: it is charged
    what is left of the nodes' mean start cost ``start_s`` (:func:`start_costs`) and its
    events at the pace within a run.

    ``sent``: the nodes' mean seconds per event of a file's run from its packets getting the
    slot on the worker to their storing (:func:`~datasched.service.live_rates.sent_paces`),
    and ``file_age``: per job, per file, how long ago its first packet got the slot. Where
    ``sent`` is known, a job sent to its node (running, or with a packet back) is priced
    from the runs: a file begun has what is left of its run (its whole run less its age:
    its other packets are under way, not waiting), at least :data:`OVERDUE_SHARE` of its
    whole run, at most its events left at the run's pace (near a file's end its last
    packets are small); a file not begun, its whole run. A job sent with no packet back has
    its files' whole runs, its start on the node in the first (a run counts from the slot, so
    the start its first packet pays is in it, and the wait behind the node's other jobs,
    which the simulated queue prices, is not: docs/service-whatif.md), less how long it has
    been running (``running_for``) from the first of them, at least :data:`OVERDUE_SHARE`
    of that run: its first packets are under way.

    ``slot_age``: per job, how long its subjob has had its slot, as the runner says. A file
    of a job with a packet back whose packets are out (``FileTodo.under_way``) but none is
    stored has no age in the store; it is given that age, so that its run under way is not
    charged whole (docs/service-whatif.md, "Refreshes that close in on an end").

    ``cycle``: the nodes' mean seconds per event of a file's run with the gap before it
    (:func:`~datasched.service.live_rates.cycle_paces`; the runs that began with a
    sandbox's start left out, which the simulation charges on its own). A job not sent yet
    is priced at it where it is known, not at the nodes' busy rate, which counts every wait
    since a job's submission as the node's work (docs/service-whatif.md)."""
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
        ages = (file_age or {}).get(j.id, {})
        running = (running_for or {}).get(j.id)
        if sent is not None and left > 0 and (ages or running is not None):
            going = job_time_per_event(sent, mean_cpu, cpu)
            time_left = 0.0
            under_way = None if ages else running  # no packet back: its first file is going
            slot = (slot_age or {}).get(j.id) if ages else None
            for f in j.files:
                n_left = _left(f)
                age = ages.get(f.url)
                if age is None and f.under_way and slot is not None:
                    age = slot  # out on its worker since the subjob got the slot, none back
                if age is None and under_way is not None and n_left > 0:
                    age, under_way = under_way, None
                if n_left <= 0:
                    continue
                if age is None:
                    time_left += n_left * going
                else:
                    # what is left of its run, at least the overdue share of it, and never
                    # more than its events left would take from scratch: near a file's end
                    # its last packets are small, and a quarter of the whole run is more
                    run = f.n_events * going
                    time_left += min(max(run - age, OVERDUE_SHARE * run), n_left * going)
            fresh = time_left / left
        elif cycle is not None and left > 0 and running is None and not ages:
            fresh = job_time_per_event(cycle, mean_cpu, cpu)
        elif started is not None and left > 0:
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
