"""``GET /api/v1/whatif?policy=P[&policy=Q...]``: how the current queue would finish under
each policy, predicted by the simulator from the daemon's live snapshot.

The route needs the snapshot: it depends on :func:`get_snapshot`, which the application
overrides (``app.dependency_overrides[get_snapshot] = ...``) with its own; left alone, the
route answers 503. Errors are ``{"field", "reason"}`` details, which the application answers
as ``{"errors": [{"field", "reason"}]}``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query

from datasched.policies.registry import UnknownPolicyError
from datasched.service.api.errors import error_responses
from datasched.service.contracts import ClusterSnapshot, SnapshotError
from datasched.service.whatif import compare

__all__ = ["get_snapshot", "router"]

MAX_POLICIES = 8
"""Policies one request may ask for (each is a simulation of the whole queue)."""

router = APIRouter()


def get_snapshot() -> ClusterSnapshot:
    """The daemon's live snapshot; the application overrides this dependency."""
    raise HTTPException(503, {"field": "snapshot", "reason": "no live cluster state here"})


@router.get("/api/v1/whatif", tags=["whatif"], responses=error_responses(400, 422, 500, 503))
def whatif(
    snapshot: Annotated[ClusterSnapshot, Depends(get_snapshot)],
    policy: Annotated[list[str], Query(min_length=1)],
) -> dict[str, Any]:
    """Each request's ETA (seconds from the snapshot's time) and the makespan, per policy."""
    if len(policy) > MAX_POLICIES:
        raise HTTPException(
            400, {"field": "policy", "reason": f"at most {MAX_POLICIES} policies at once"}
        )
    try:
        return compare(snapshot, policy).as_dict()
    except UnknownPolicyError as exc:
        raise HTTPException(400, {"field": "policy", "reason": str(exc)}) from exc
    except SnapshotError as exc:
        raise HTTPException(500, {"field": f"snapshot.{exc.field}", "reason": exc.reason}) from exc
