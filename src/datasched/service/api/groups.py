"""``/api/v1/groups``: the groups with their priority, quota, target and achieved share
(anyone with a token reads them), and ``PUT /api/v1/groups/{name}`` (administrators only)
to set a group's priority and quota."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict

from datasched.service.api.deps import CallerDep, ServiceState, StateDep
from datasched.service.api.errors import error_responses
from datasched.service.store.ops import group_queues
from datasched.service.users import GroupInfo, UserError, list_groups, set_group

__all__ = ["GroupChange", "router"]

router = APIRouter(prefix="/groups", tags=["groups"])


class GroupChange(BaseModel):
    """A group's new priority and/or quota (each > 0; one left out stays as it is)."""

    model_config = ConfigDict(extra="forbid")

    priority: float | None = None
    quota: float | None = None


def _rows(svc: ServiceState, groups: list[GroupInfo]) -> list[dict[str, Any]]:
    achieved = svc.dispatcher.shares() if svc.dispatcher is not None else None
    with svc.store.reading() as s:
        queues = {q.group: q for q in group_queues(s, achieved)}
    rows = []
    for g in groups:
        q = queues.get(g.name)
        rows.append(
            {
                "name": g.name,
                "priority": g.priority,
                "quota": g.quota,
                "users": g.users,
                "waiting": q.waiting if q else 0,
                "running": q.running if q else 0,
                "target_share": q.target if q else 0.0,
                "achieved_share": (achieved or {}).get(g.name, 0.0)
                if achieved is not None
                else None,
            }
        )
    return rows


@router.get("", responses=error_responses(401, 429))
def groups(svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """Every group: priority, quota, users, jobs waiting and running, its target share (its
    weight, quota x priority, over those of the groups with work) and the share of the
    recent CPU it achieved (null without a dispatcher)."""
    with svc.store.reading() as s:
        found = list_groups(s)
    return {"groups": _rows(svc, found)}


@router.put("/{name}", responses=error_responses(401, 403, 413, 422, 429))
def change(name: str, body: GroupChange, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """Set a group's priority and/or quota (made if new): administrators only (403 for
    others); 422 naming the field for a value not > 0; 413 for a body past
    ``--max-json-kb``."""
    if not caller.admin:
        raise HTTPException(
            403,
            detail={"errors": [{"field": "caller", "reason": "administrators only"}]},
        )
    try:
        with svc.store.session() as s:
            info = set_group(s, name, priority=body.priority, quota=body.quota)
    except UserError as exc:
        field, _, reason = str(exc).partition(": ")
        raise HTTPException(422, detail={"errors": [{"field": field, "reason": reason}]}) from exc
    return _rows(svc, [info])[0]
