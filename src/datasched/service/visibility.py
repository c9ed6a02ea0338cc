"""What a caller may see of other users' work: an administrator sees everything; an ordinary
user sees the cluster and the queue in aggregate (nodes, slots busy, cache fill, jobs by
state, totals) and only their own requests and elementary jobs by id (docs/service.md,
"What users and administrators see").

Ids are the leak: a request's id is the key to nothing without its owner's token (404 for
anyone else), but listing other users' ids tells who runs what and when. The runner's view
of the cluster (:meth:`~datasched.service.daemon.Runner.cluster`) and the what-if answer
name every job; :func:`cluster_view` and :func:`whatif_view` keep, for an ordinary user,
what is theirs and counts of the rest. The runner's view is read by allow-list: a key the
runner adds later is not shown to ordinary users until it is added here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from datasched.service.store.models import Job, Request
from datasched.service.users import Caller

__all__ = ["EVERYTHING", "Scope", "cluster_view", "scope_of", "whatif_view"]

_CHUNK = 500
"""Ids asked of the store at once (SQLite bounds the parameters of one statement)."""

_NODE_KEYS = (
    "name",
    "up",
    "slots_total",
    "cache_capacity_bytes",
    "cached_bytes",
    "cached_files",
    "cache_fill",
)
"""What an ordinary user sees of a node besides its slots: not its address (a worker's
address is a way into the cluster), not the files its cache holds (other users' inputs)."""
_TOP_KEYS = ("running", "policy")
"""What an ordinary user sees of the runner's view besides the nodes."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The requests and elementary jobs a caller may see by id: all (``everything``), or
    those listed (the caller's own)."""

    everything: bool
    requests: frozenset[str] = field(default_factory=frozenset)
    jobs: frozenset[str] = field(default_factory=frozenset)

    def request(self, request_id: str) -> bool:
        return self.everything or request_id in self.requests

    def job(self, job_id: str) -> bool:
        return self.everything or job_id in self.jobs


EVERYTHING = Scope(everything=True)
"""An administrator's scope."""


def scope_of(s: Session, caller: Caller, job_ids: Iterable[str]) -> Scope:
    """What ``caller`` may see among ``job_ids``: everything for an administrator, else
    the caller's own jobs among them and their requests (an id the store does not know is
    nobody's: hidden)."""
    if caller.admin:
        return EVERYTHING
    ids = sorted({str(j) for j in job_ids if j})
    jobs: set[str] = set()
    requests: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        rows = s.execute(
            select(Job.id, Job.request_id)
            .join(Request, Job.request_id == Request.id)
            .where(Request.owner_id == caller.id, Job.id.in_(ids[i : i + _CHUNK]))
        )
        for job_id, request_id in rows:
            jobs.add(str(job_id))
            requests.add(str(request_id))
    return Scope(False, frozenset(requests), frozenset(jobs))


def view_job_ids(view: Mapping[str, Any]) -> set[str]:
    """Every job id a runner's view names (its nodes' slots and ``running``, its jobs)."""
    ids: set[str] = set()
    for node in view.get("nodes") or ():
        if not isinstance(node, Mapping):
            continue
        slots = node.get("slots")
        if isinstance(slots, list):
            ids.update(str(s["job"]) for s in slots if isinstance(s, Mapping) and s.get("job"))
        ids.update(str(j) for j in node.get("running") or ())
    for job in view.get("jobs") or ():
        if isinstance(job, Mapping) and job.get("id"):
            ids.add(str(job["id"]))
    return ids


def _node(node: Mapping[str, Any], scope: Scope) -> tuple[dict[str, Any], int, int]:
    """The node as ``scope`` may see it, its slots and its slots busy."""
    out = {k: node[k] for k in _NODE_KEYS if k in node}
    slots = node.get("slots")
    if isinstance(slots, list):
        shown = []
        for slot in slots:
            if not isinstance(slot, Mapping):
                continue
            job = slot.get("job")
            shown.append(
                {
                    "slot": slot.get("slot"),
                    "busy": job is not None,
                    "job": str(job) if job is not None and scope.job(str(job)) else None,
                }
            )
        busy = sum(1 for s in shown if s["busy"])
        out["slots"] = shown
        total = int(node.get("slots_total") or len(shown))
    else:
        running = [str(j) for j in node.get("running") or ()]
        busy = len(running)
        out["slots"] = slots if isinstance(slots, int) else 0
        out["running"] = [j for j in running if scope.job(j)]
        total = max(int(slots) if isinstance(slots, int) else 0, busy)
    out["slots_busy"] = busy
    out.setdefault("slots_total", total)
    fill = _fill(node)
    if fill is not None:
        out["cache_fill"] = fill
    return out, total, busy


def _fill(node: Mapping[str, Any]) -> float | None:
    """The node's cache fill, 0-1: as the runner says it, else its bytes cached over its
    capacity; None when neither is known."""
    fill = node.get("cache_fill")
    if isinstance(fill, int | float):
        return float(fill)
    held, capacity = node.get("cached_bytes"), node.get("cache_capacity_bytes")
    if isinstance(held, int | float) and isinstance(capacity, int | float) and capacity > 0:
        return min(1.0, float(held) / float(capacity))
    return None


def cluster_view(
    view: Mapping[str, Any], counts: Mapping[str, int], scope: Scope
) -> dict[str, Any]:
    """``GET /api/v1/cluster``'s answer: the runner's ``view`` with the store's jobs by
    state (``counts``) and totals (nodes, nodes up, slots, slots busy); for a caller who
    may not see everything, the nodes by allow-list and only the caller's own job ids (a
    slot running another's job says ``busy`` with no id)."""
    nodes = [n for n in view.get("nodes") or () if isinstance(n, Mapping)]
    shown = [_node(n, scope) for n in nodes]
    totals = {
        "nodes": len(nodes),
        "nodes_up": sum(1 for n in nodes if n.get("up", True)),
        "slots": sum(t for _, t, _ in shown),
        "slots_busy": sum(b for _, _, b in shown),
    }
    jobs = {str(k): int(v) for k, v in counts.items()}
    if scope.everything:
        full = {k: v for k, v in view.items() if k != "nodes"}
        full_nodes = [
            {**n, "slots_busy": b, "cache_fill": o.get("cache_fill")}
            for n, (o, _, b) in zip(nodes, shown, strict=True)
        ]
        return {**full, "nodes": full_nodes, "jobs": jobs, "totals": totals, "scope": "all"}
    top = {k: view[k] for k in _TOP_KEYS if k in view}
    mine = [
        {k: j[k] for k in ("id", "status", "events", "done") if k in j}
        for j in view.get("jobs") or ()
        if isinstance(j, Mapping) and j.get("id") and scope.job(str(j["id"]))
    ]
    return {
        **top,
        "nodes": [n for n, _, _ in shown],
        "jobs": jobs,
        "my_jobs": mine,
        "totals": totals,
        "scope": "own",
    }


def whatif_view(answer: Mapping[str, Any], scope: Scope) -> dict[str, Any]:
    """A what-if answer (:meth:`~datasched.service.whatif.Comparison.as_dict`) as ``scope``
    may see it: the makespans (aggregates) whole, the ETAs of the caller's own requests and
    jobs only, and how many others were predicted (``others``)."""
    if scope.everything:
        return dict(answer)
    requests: Collection[Mapping[str, Any]] = answer.get("requests") or ()
    jobs: Collection[Mapping[str, Any]] = answer.get("jobs") or ()
    mine_r = [r for r in requests if scope.request(str(r.get("request")))]
    mine_j = [j for j in jobs if scope.job(str(j.get("job")))]
    return {
        **{k: v for k, v in answer.items() if k not in ("requests", "jobs")},
        "requests": mine_r,
        "jobs": mine_j,
        "others": {"requests": len(requests) - len(mine_r), "jobs": len(jobs) - len(mine_j)},
    }
