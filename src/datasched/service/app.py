"""The service's web application (FastAPI): the API under ``/api/v1`` (its OpenAPI schema at
``/api/v1/openapi.json``), Prometheus metrics at ``/metrics``, and the daemon's dispatcher
started and stopped with the application, with a sweep of old refused requests.

Errors are ``{"errors": [{"field", "reason"}]}`` with the status: 401 (no valid token), 403
(administrators only), 404 (no such request, or another user's: the same answer), 409 (not
in a state for it), 413 (too large), 415 (not XML or YAML), 422 (invalid), 429 (rate limit,
or too many requests not yet final; with ``Retry-After``). The OpenAPI schema declares the
bearer scheme and, per operation, these statuses with the ``Errors`` schema
(docs/service.md, "The API").
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import func, select
from starlette.exceptions import HTTPException as StarletteHTTPException

from datasched import __version__
from datasched.service import api_whatif
from datasched.service.api import groups, misc, requests
from datasched.service.api.bodies import BoundedBodies
from datasched.service.api.deps import CallerDep, Limits, ServiceState, StateDep, current_caller
from datasched.service.api.errors import ERROR_STATUSES, error_responses
from datasched.service.catalog import Catalog
from datasched.service.contracts import ClusterSnapshot, SplitStrategy
from datasched.service.daemon import Dispatcher, Runner
from datasched.service.dashboard import router as dashboard_router
from datasched.service.eta_watch import EtaWatch
from datasched.service.live import live_snapshot
from datasched.service.ports import RequestLanguage
from datasched.service.store import refused
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet
from datasched.service.users import Caller
from datasched.service.visibility import Scope, scope_of

__all__ = ["API_PREFIX", "build_state", "create_app", "sweep_refused"]

API_PREFIX = "/api/v1"

log = logging.getLogger(__name__)


def build_state(
    store: Store,
    language: RequestLanguage,
    *,
    runner: Runner | None = None,
    limits: Limits | None = None,
    split: SplitStrategy = SplitStrategy.BY_POLICY,
    period_s: float = 0.5,
    policy: str = "out-of-order",
    eta_period_s: float | None = 5.0,
    max_held: int | None = None,
    usage_half_life_s: float = 3600.0,
) -> ServiceState:
    """The service over ``store``: with a ``runner``, a dispatcher hands it the jobs by fair
    share, at most ``max_held`` at a time (None: twice the cluster's slots), the groups'
    usage decaying with ``usage_half_life_s``; and every ``eta_period_s`` the simulator
    predicts each open request's finish under ``policy`` (None: no ETAs)."""
    dispatcher = None
    if runner is not None:
        dispatcher = Dispatcher(
            store, runner, period_s=period_s, max_held=max_held, half_life_s=usage_half_life_s
        )
    eta = None
    if runner is not None and eta_period_s is not None:
        eta = EtaWatch(
            store,
            runner.cluster,
            policy=policy,
            period_s=eta_period_s,
            admission=dispatcher.admission if dispatcher is not None else None,
        )
    return ServiceState(
        store=store,
        catalog=Catalog(store),
        language=language,
        limits=limits or Limits(),
        split=split,
        runner=runner,
        dispatcher=dispatcher,
        eta=eta,
    )


def sweep_refused(svc: ServiceState) -> int:
    """Delete the refused requests older than ``--refused-days``; how many."""
    cutoff = datetime.now(UTC) - timedelta(days=svc.limits.refused_days)
    with svc.store.session() as s:
        return refused.sweep_refused(s, cutoff)


async def _sweep_forever(svc: ServiceState) -> None:
    """Sweep now, then every ``svc.sweep_period_s`` (a store that fails is tried again at
    the next round)."""
    while True:
        try:
            n = await asyncio.to_thread(sweep_refused, svc)
            if n:
                days = svc.limits.refused_days
                log.info("deleted %d refused requests older than %g days", n, days)
        except Exception:
            log.exception("deleting old refused requests failed")
        await asyncio.sleep(svc.sweep_period_s)


def _body_limits(limits: Limits) -> Callable[[str, str], int]:
    """The largest body of each call: a submission's ``--max-request-kb``, any other's
    ``--max-json-kb``."""
    submit = f"{API_PREFIX}/requests"

    def limit_for(method: str, path: str) -> int:
        if method == "POST" and path.rstrip("/") == submit:
            return limits.max_request_bytes
        return limits.max_json_bytes

    return limit_for


def _can_fail_validation(operation: dict[str, Any]) -> bool:
    """Whether FastAPI's own validation can refuse the operation's input: it has a body or
    a parameter that is not free text (a path or query string always validates)."""
    if "requestBody" in operation:
        return True
    return any(p.get("schema", {}).get("type") != "string" for p in operation.get("parameters", ()))


def _own_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The schema FastAPI makes, with every validation error (422) answered in the API's
    own ``Errors`` schema rather than FastAPI's ``HTTPValidationError``, which is dropped:
    a 422 FastAPI adds to an operation whose input cannot fail its validation is removed
    (the operations declare the 422s they answer themselves)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = FastAPI.openapi(app)
        default = "#/components/schemas/HTTPValidationError"
        ours = {
            "description": ERROR_STATUSES[422],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}},
        }
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                answer = operation.get("responses", {}).get("422")
                if answer is None:
                    continue
                ref = answer.get("content", {}).get("application/json", {}).get("schema", {})
                if ref.get("$ref") != default:
                    continue
                if _can_fail_validation(operation):
                    operation["responses"]["422"] = ours
                else:
                    del operation["responses"]["422"]
        components = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        app.openapi_schema = schema
        return schema

    return openapi


def _store_counts(svc: ServiceState) -> Callable[[], dict[str, dict[str, float]]]:
    def read() -> dict[str, dict[str, float]]:
        with svc.store.reading() as s:
            jobs = dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
            events, packets = s.execute(
                select(func.sum(Packet.stop - Packet.start), func.count())
            ).one()
        return {
            "jobs": {str(k): float(v) for k, v in jobs.items()},
            "done": {"events": float(events or 0), "packets": float(packets or 0)},
        }

    return read


def _one_whatif_a_user(svc: ServiceState) -> Callable[[Caller], Iterator[None]]:
    """A dependency that lets each user have one what-if under way at a time: another at
    once is refused (429, field ``whatif``). Each simulates for up to the limit's seconds
    (``Limits.whatif_budget_s``), so calls at once would multiply what one user costs the
    daemon by their burst of calls."""
    under_way: set[str] = set()
    lock = threading.Lock()

    def turn(caller: CallerDep) -> Iterator[None]:
        with lock:
            if caller.name in under_way:
                wait = max(1, math.ceil(svc.limits.whatif_budget_s))
                svc.metrics.rate_limited.inc()
                reason = "one what-if at a time: yours before this one is still running"
                raise HTTPException(
                    429,
                    detail={"errors": [{"field": "whatif", "reason": reason}]},
                    headers={"Retry-After": str(wait)},
                )
            under_way.add(caller.name)
        try:
            yield
        finally:
            with lock:
                under_way.discard(caller.name)

    return turn


def create_app(svc: ServiceState) -> FastAPI:
    """The application serving ``svc``; its lifespan starts and stops the dispatcher."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if svc.dispatcher is not None:
            svc.dispatcher.start()
        if svc.eta is not None:
            svc.eta.start()
        sweeper = asyncio.create_task(_sweep_forever(svc))
        try:
            yield
        finally:
            sweeper.cancel()
            if svc.eta is not None:
                svc.eta.stop()
            if svc.dispatcher is not None:
                svc.dispatcher.stop()

    app = FastAPI(
        title="datasched service",
        version=__version__,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = svc
    setattr(app, "openapi", _own_openapi(app))  # noqa: B010 (mypy: a method replaced)
    svc.metrics.watch_store(_store_counts(svc))
    app.include_router(requests.router, prefix=API_PREFIX)
    app.include_router(misc.router, prefix=API_PREFIX)
    app.include_router(groups.router, prefix=API_PREFIX)
    app.include_router(dashboard_router)
    # What-if: the simulator over the live state, for any user with a token, who sees the
    # ETAs of their own requests only (an administrator: everyone's).
    app.include_router(
        api_whatif.router,
        dependencies=[Depends(current_caller), Depends(_one_whatif_a_user(svc))],
        responses=error_responses(401, 429),
    )
    app.dependency_overrides[api_whatif.get_budget] = lambda: svc.limits.whatif_budget_s
    if svc.runner is not None:
        runner = svc.runner
        app.dependency_overrides[api_whatif.get_snapshot] = lambda: live_snapshot(
            svc.store, runner.cluster()
        )

    def whatif_scope(
        state: StateDep,
        caller: CallerDep,
        snapshot: Annotated[ClusterSnapshot, Depends(api_whatif.get_snapshot)],
    ) -> Scope:
        with state.store.reading() as s:
            return scope_of(s, caller, [j.id for j in snapshot.jobs])

    app.dependency_overrides[api_whatif.get_scope] = whatif_scope

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: HttpRequest, exc: StarletteHTTPException) -> JSONResponse:
        detail: Any = exc.detail
        if isinstance(detail, dict) and "errors" in detail:
            body = detail
        elif isinstance(detail, dict) and "field" in detail:  # the what-if router's form
            body = {"errors": [{"field": detail["field"], "reason": detail.get("reason", "")}]}
        else:
            body = {"errors": [{"field": "", "reason": str(detail)}]}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": ".".join(str(p) for p in e.get("loc", ())), "reason": str(e.get("msg"))}
            for e in exc.errors()
        ]
        return JSONResponse({"errors": errors}, status_code=422)

    # Bodies bounded as they are read (inside the measure below, so that a 413 is counted).
    app.add_middleware(BoundedBodies, limit_for=_body_limits(svc.limits))

    @app.middleware("http")
    async def measure(
        request: HttpRequest, call_next: Callable[[HttpRequest], Awaitable[Response]]
    ) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        svc.metrics.latency.observe(time.perf_counter() - t0)
        svc.metrics.calls.labels(request.method, str(response.status_code)).inc()
        return response

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
