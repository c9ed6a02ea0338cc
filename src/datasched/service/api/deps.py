"""What every route of the API shares: the service's state, the caller (a bearer token),
the per-user rate limit (a token bucket) and the error answers."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException
from fastapi import Request as HttpRequest
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from datasched.service.catalog import Catalog
from datasched.service.contracts import SplitStrategy
from datasched.service.daemon import Dispatcher, Runner
from datasched.service.eta_watch import EtaWatch
from datasched.service.metrics import Metrics
from datasched.service.ports import RequestLanguage
from datasched.service.store.db import Store
from datasched.service.users import Caller, authenticate

__all__ = [
    "BEARER",
    "CallerDep",
    "Limits",
    "ServiceState",
    "StateDep",
    "TokenBucket",
    "current_caller",
    "not_found",
    "service_state",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """The API's limits (each a ``datasched serve`` option; docs/service.md, "Limits"): the
    largest request body and the largest body of any other call, each user's rate (calls a
    second, sustained) and burst (calls at once), each user's requests not yet final, what
    is kept of refused requests: how many per user, for how many days, and the first bytes
    of each body, the packets' results served at once, and the time a what-if may
    simulate."""

    max_request_bytes: int = 1_000_000
    rate_per_s: float = 20.0
    burst: int = 40
    max_json_bytes: int = 64_000
    """Largest body of a call other than a submission (JSON: ``PUT /groups/{name}``)."""
    max_pending: int = 100
    """Requests of a user not yet final (pending, submitted, queued, running)."""
    refused_keep: int = 50
    """Refused requests kept per user; past it the oldest are deleted."""
    refused_days: float = 7.0
    """Days a refused request is kept."""
    refused_body_bytes: int = 16_000
    """Bytes of a refused request's body kept (the rest is cut, and the cut said)."""
    max_packets_result_bytes: int = 256_000_000
    """The most bytes of packets' results ``GET /requests/{id}/result?packets=true`` serves
    at once (it holds them, and their pickled list, in the daemon's memory); past it 409,
    field ``packets``."""
    whatif_budget_s: float = 10.0
    """Seconds of simulation one what-if call may take, its policies together; past it the
    call is refused (400, field ``policy``). A user may have one what-if under way at a time
    (another at once: 429, field ``whatif``)."""


class TokenBucket:
    """Per-user token buckets: each holds up to ``burst`` tokens, refilled at ``rate`` a
    second; a call takes one, or is refused with the seconds to wait."""

    def __init__(self, rate: float, burst: int, clock: Any = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 if a token was taken, else the seconds until one is there."""
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate if self.rate > 0 else 3600.0


@dataclass
class ServiceState:
    """What the API works with: the store, the catalog, the request language, the runner
    and its dispatcher (None: requests are stored and wait), limits, metrics."""

    store: Store
    catalog: Catalog
    language: RequestLanguage
    limits: Limits = field(default_factory=Limits)
    split: SplitStrategy = SplitStrategy.BY_POLICY
    runner: Runner | None = None
    dispatcher: Dispatcher | None = None
    eta: EtaWatch | None = None
    """Each open request's ETA, refreshed (None: no predictions)."""
    metrics: Metrics = field(default_factory=Metrics)
    sweep_period_s: float = 3600.0
    """How often refused requests past ``limits.refused_days`` are deleted."""
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(self.limits.rate_per_s, self.limits.burst)


def service_state(request: HttpRequest) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


StateDep = Annotated[ServiceState, Depends(service_state)]

BEARER = HTTPBearer(
    scheme_name="bearer",
    bearerFormat="ds_<id>_<secret>",
    description="A user's token (`datasched users add`), as `Authorization: Bearer TOKEN`.",
    auto_error=False,
)
"""The API's security scheme, as OpenAPI declares it; :func:`current_caller` checks it."""


def current_caller(
    request: HttpRequest,
    svc: StateDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Caller:
    """The caller, from ``Authorization: Bearer TOKEN``: 401 without a valid token, 429
    past the caller's rate. (``BEARER`` is a dependency so that every operation needing a
    caller declares the scheme in the OpenAPI schema; the header is read here, to answer
    in the API's own error form.)"""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    caller = None
    if scheme.lower() == "bearer" and token.strip():
        with svc.store.reading() as s:
            caller = authenticate(s, token.strip())
    if caller is None:
        raise HTTPException(
            401,
            detail={"errors": [{"field": "Authorization", "reason": "a valid token is needed"}]},
            headers={"WWW-Authenticate": "Bearer"},
        )
    wait = svc.bucket.take(caller.name)
    if wait > 0:
        svc.metrics.rate_limited.inc()
        # Whole seconds (Retry-After has no fractions), rounded up, never 0: the message
        # says what the header says.
        retry = max(1, math.ceil(wait))
        raise HTTPException(
            429,
            detail={"errors": [{"field": "rate", "reason": f"too many calls; retry in {retry} s"}]},
            headers={"Retry-After": str(retry)},
        )
    return caller


CallerDep = Annotated[Caller, Depends(current_caller)]


def not_found(request_id: str) -> HTTPException:
    """404 for a request that does not exist or is another user's (the same answer)."""
    return HTTPException(
        404, detail={"errors": [{"field": "id", "reason": f"no request {request_id!r}"}]}
    )
