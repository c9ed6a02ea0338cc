"""The dashboard's routes: the page at ``/dashboard`` (``/`` sends there), its script and
style sheet, and the HTML fragments the page fetches every second with the token the user
logged in with (``Authorization: Bearer``, as the API): who is logged in, the cluster and
its queue, the caller's requests with their progress, and one request with its jobs, its
packets' statistics and a plot. Submitting and cancelling go through the API itself.

An ordinary user sees what the API shows them (:mod:`datasched.service.visibility`): the
cluster in aggregate, with only their own jobs by id, and their own requests; an
administrator sees everyone's."""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from datasched.service.api.deps import CallerDep, StateDep, not_found
from datasched.service.contracts import JobState
from datasched.service.dashboard.plot import progress_plot
from datasched.service.dashboard.views import (
    command_run,
    eta_text,
    job_rows,
    node_rows,
    queue_counts,
    request_packets,
    request_progress,
    request_rows,
)
from datasched.service.store import ops
from datasched.service.visibility import cluster_view, scope_of, view_job_ids

__all__ = ["PACKETS_SHOWN", "REQUESTS_SHOWN", "router"]

router = APIRouter(include_in_schema=False)

REQUESTS_SHOWN = 50
"""The newest requests the list shows."""
PACKETS_SHOWN = 200
"""The newest packets a request's table shows (its statistics and plot take them all, read
as aggregates and samples: docs/service.md)."""

_STATIC = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_env = Environment(
    loader=PackageLoader("datasched.service.dashboard", "templates"),
    autoescape=select_autoescape(["html", "svg"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["bytes"] = lambda n: _human_bytes(float(n))
_env.filters["when"] = lambda at: "—" if at is None else f"{at:%Y-%m-%d %H:%M:%S} UTC"


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def render(template: str, **context: Any) -> str:
    """A template of the dashboard, filled in."""
    return _env.get_template(template).render(**context)


def _fragment(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(
        render(template, **context),
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard is the service's front page."""
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/dashboard")
def page() -> HTMLResponse:
    """The page: a login form, then the cluster, the submit form, the requests and one
    request; the script fills them from the fragments below."""
    return HTMLResponse(render("page.html"), headers=_PAGE_HEADERS)


@router.get("/dashboard/static/{name}")
def static(name: str) -> Response:
    """The page's script, style sheet and icon (package data; nothing from elsewhere)."""
    if name not in _STATIC:
        raise HTTPException(404, detail={"errors": [{"field": "name", "reason": "no such file"}]})
    data = resources.files("datasched.service.dashboard").joinpath("static", name).read_bytes()
    return Response(
        data,
        media_type=_STATIC[name],
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/dashboard/fragments/whoami")
def whoami(caller: CallerDep) -> HTMLResponse:
    """Who the token is: checks a token at login."""
    return _fragment("whoami.html", caller=caller)


@router.get("/dashboard/fragments/cluster")
def cluster(svc: StateDep, caller: CallerDep) -> HTMLResponse:
    """The nodes (slots, cache fill, what each runs: an ordinary user sees the ids of their
    own jobs only), the elementary jobs by state, and each group's queue."""
    runner_view = dict(svc.runner.cluster()) if svc.runner is not None else {"nodes": []}
    with svc.store.reading() as s:
        view = cluster_view(runner_view, {}, scope_of(s, caller, view_job_ids(runner_view)))
        queue = queue_counts(s)
        groups = ops.group_queues(
            s, svc.dispatcher.shares() if svc.dispatcher is not None else None
        )
    return _fragment(
        "cluster.html",
        groups=groups,
        nodes=node_rows(view),
        queue=queue,
        policy=view.get("policy"),
        has_runner=svc.runner is not None,
    )


@router.get("/dashboard/fragments/requests")
def requests(svc: StateDep, caller: CallerDep) -> HTMLResponse:
    """The caller's newest requests (an administrator's: everyone's), with progress."""
    with svc.store.reading() as s:
        found = ops.list_requests(s, caller, limit=REQUESTS_SHOWN)
        rows = request_rows(s, found, svc.eta.eta if svc.eta is not None else None)
    return _fragment("requests.html", requests=rows, caller=caller, shown=REQUESTS_SHOWN)


@router.get("/dashboard/fragments/requests/{request_id}")
def request(request_id: str, svc: StateDep, caller: CallerDep) -> HTMLResponse:
    """A request: its state, progress, errors, elementary jobs, its packets' statistics,
    the newest packets and the plot of events done over time; a command's request, its
    run instead (started, ended, exit status), no packets."""
    with svc.store.reading() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        jobs = job_rows(s, req)
        progress = request_progress(jobs)
        # A command's request reads no events in packets: its run instead of their figures.
        run = command_run(jobs)
        packets = request_packets(s, req, shown=PACKETS_SHOWN) if run is None else None
        context = {
            "req": req,
            "final": JobState(req.state).final,
            "jobs": jobs,
            "run": run,
            "progress": progress,
            "stats": None if packets is None else packets.stats,
            "packets": [] if packets is None else packets.newest,
            "packets_hidden": 0 if packets is None else packets.stats.count - len(packets.newest),
            "plot": (
                None
                if packets is None
                else progress_plot(packets.progress, progress.events_total, packets.stats.count)
            ),
            "eta": eta_text(svc.eta.eta(req.id)) if svc.eta is not None else "—",
            "eta_policy": svc.eta.policy if svc.eta is not None else None,
        }
        return _fragment("request.html", **context)
