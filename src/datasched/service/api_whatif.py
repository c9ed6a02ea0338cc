"""``GET /api/v1/whatif?policy=P[&policy=Q...][&param=NAME=VALUE...]``: how the current
queue would finish under each policy (each ``param`` going to every policy that takes it),
predicted by the simulator from the daemon's live snapshot.

Each call's simulations together get :func:`get_budget`'s seconds (the application's limit;
left alone, none): past it the call is refused (400, field ``policy``) and the daemon's time
is spent no further. The route needs the snapshot: it depends on :func:`get_snapshot`,
which the application overrides (``app.dependency_overrides[get_snapshot] = ...``) with its
own; left alone, the route answers 503. What the caller may see by id comes from
:func:`get_scope`, which the application overrides with the caller's scope (an ordinary
user: their own requests and jobs; :mod:`datasched.service.visibility`); left alone,
everything (the router on its own has no callers). Errors are ``{"field", "reason"}``
details, which the application answers as ``{"errors": [{"field", "reason"}]}``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query

from datasched.policies.registry import UnknownPolicyError
from datasched.service.api.errors import error_responses
from datasched.service.contracts import ClusterSnapshot, SnapshotError
from datasched.service.visibility import EVERYTHING, Scope, whatif_view
from datasched.service.whatif import BudgetSpent, ParamsError, compare, params_from_text

__all__ = ["get_budget", "get_scope", "get_snapshot", "router"]

MAX_POLICIES = 8
"""Policies one request may ask for (each is a simulation of the whole queue)."""
MAX_PARAMS = 32
"""Policy parameters one request may give."""

router = APIRouter()


def get_snapshot() -> ClusterSnapshot:
    """The daemon's live snapshot; the application overrides this dependency."""
    raise HTTPException(503, {"field": "snapshot", "reason": "no live cluster state here"})


def get_budget() -> float | None:
    """Seconds of simulation one call may take, its policies together; the application
    overrides this dependency with its limit (None: no limit)."""
    return None


def get_scope() -> Scope:
    """What the caller may see by id; the application overrides this dependency."""
    return EVERYTHING


@router.get(
    "/api/v1/whatif",
    tags=["whatif"],
    responses=error_responses(400, 422, 500, 503),
)
def whatif(
    snapshot: Annotated[ClusterSnapshot, Depends(get_snapshot)],
    scope: Annotated[Scope, Depends(get_scope)],
    policy: Annotated[list[str], Query(min_length=1)],
    budget: Annotated[float | None, Depends(get_budget)],
    param: Annotated[list[str] | None, Query()] = None,
) -> dict[str, Any]:
    """Each request's ETA (seconds from the snapshot's time) and the makespan, per policy.
    ``param`` (``NAME=VALUE``, repeatable) goes to every policy asked for that takes it, as
    ``datasched sweep`` does; one naming a file (a performance map) is refused: the daemon
    reads no path of the caller's choosing. An ordinary user gets the ETAs of their own
    requests and jobs only, and how many others were predicted (``others``); an
    administrator everyone's."""
    if len(policy) > MAX_POLICIES:
        raise HTTPException(
            400, {"field": "policy", "reason": f"at most {MAX_POLICIES} policies at once"}
        )
    if param is not None and len(param) > MAX_PARAMS:
        raise HTTPException(
            400, {"field": "param", "reason": f"at most {MAX_PARAMS} parameters at once"}
        )
    try:
        params = params_from_text(policy, param or [], files=False)
        return whatif_view(compare(snapshot, policy, params, budget_s=budget).as_dict(), scope)
    except BudgetSpent as exc:
        reason = f"{exc}; ask for fewer policies, or parameters that cut fewer packets"
        raise HTTPException(400, {"field": "policy", "reason": reason}) from exc
    except UnknownPolicyError as exc:
        raise HTTPException(400, {"field": "policy", "reason": str(exc)}) from exc
    except ParamsError as exc:
        raise HTTPException(400, {"field": "param", "reason": str(exc)}) from exc
    except SnapshotError as exc:
        raise HTTPException(500, {"field": f"snapshot.{exc.field}", "reason": exc.reason}) from exc
