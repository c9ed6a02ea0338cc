"""``/api/v1/catalog`` (datasets by query) and ``/api/v1/cluster`` (the runner's view:
nodes, slots, cache fill, what runs where; and the store's queue). An ordinary user sees
the cluster in aggregate and only their own jobs by id; an administrator everything
(:mod:`datasched.service.visibility`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException
from sqlalchemy import func, select

from datasched.service.api.deps import CallerDep, StateDep
from datasched.service.api.errors import error_responses
from datasched.service.catalog import CatalogQueryError
from datasched.service.store.models import Job
from datasched.service.visibility import cluster_view, scope_of, view_job_ids

__all__ = ["router"]

router = APIRouter()


@router.get("/catalog/datasets", tags=["catalog"], responses=error_responses(401, 422, 429))
def datasets(svc: StateDep, caller: CallerDep, query: str = "") -> dict[str, Any]:
    """The datasets matching ``query`` (``year=2004 system=AuAu energy>=100 keyword``)."""
    try:
        found = svc.catalog.datasets(query)
    except CatalogQueryError as exc:
        raise HTTPException(
            422, detail={"errors": [{"field": "query", "reason": str(exc)}]}
        ) from exc
    return {"datasets": [asdict(d) for d in found]}


@router.get("/cluster", tags=["cluster"], responses=error_responses(401, 429))
def cluster(svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """The cluster as the runner sees it (nodes, slots, cache fill), the elementary jobs by
    state and totals. An ordinary user sees only their own jobs by id (``my_jobs``, and in
    the slots that run them; a slot running another user's job is ``busy`` with no id) and
    no node's address or cached files; an administrator sees everything."""
    view = dict(svc.runner.cluster()) if svc.runner is not None else {"nodes": []}
    with svc.store.reading() as s:
        counts = dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
        scope = scope_of(s, caller, view_job_ids(view))
    return cluster_view(view, counts, scope)
