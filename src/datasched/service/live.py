"""The daemon's live state as a :class:`~datasched.service.contracts.ClusterSnapshot`, for the
simulator's predictions (``GET /api/v1/whatif``, each request's ETA).

* **Nodes** come from the runner (``cluster()``): their names, slots, cache capacity and the
  files their caches hold as the core knows them.
* **Rates** are measured from the packets stored so far: per node, the events its packets
  processed over the CPU seconds they took (one rate for cached, peer and tertiary reads:
  the store keeps no read source per packet); a node with no packet yet takes the
  predictor's default. This measures compute, not waiting on storage, so an ETA of work
  bound by tertiary reads comes out early (docs/service-whatif.md).
* **Jobs** are the store's elementary jobs not yet over, each file with the entry ranges
  still to do (its events less the packets stored).
"""

from __future__ import annotations

from collections.abc import Mapping
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
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request

__all__ = ["live_snapshot"]

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
    now = (datetime.now(UTC) - epoch).total_seconds()
    return ClusterSnapshot(time_s=max(now, 0.0), nodes=_nodes(cluster, rates), jobs=tuple(jobs))


def _aware(t: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
