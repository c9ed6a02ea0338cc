"""``/api/v1/requests``: submit a meta-job request (XML or YAML), list the caller's, read
one (state, elementary jobs, progress), cancel it, read its logs and its merged result."""

from __future__ import annotations

import logging
import math
import pickle
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Request as HttpRequest
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import func, select

from datasched.service.api.bodies import too_large
from datasched.service.api.deps import CallerDep, ServiceState, StateDep, not_found
from datasched.service.api.errors import error_responses
from datasched.service.contracts import FieldError, JobState, RequestInvalid
from datasched.service.store import ops, refused
from datasched.service.store.models import Packet, Request
from datasched.service.users import Caller

__all__ = ["router"]

router = APIRouter(prefix="/requests", tags=["requests"])
log = logging.getLogger(__name__)

CONTENT_TYPES = {
    "application/xml": "xml",
    "text/xml": "xml",
    "application/yaml": "yaml",
    "application/x-yaml": "yaml",
    "text/yaml": "yaml",
    "text/x-yaml": "yaml",
}
_BODY = {
    "requestBody": {
        "required": True,
        "content": {t: {"schema": {"type": "string"}} for t in CONTENT_TYPES},
    }
}


def _errors(
    status: int, *errors: FieldError, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(
        {**extra, "errors": [e.as_dict() for e in errors]},
        status_code=status,
        headers=headers,
    )


def summary(req: Request) -> dict[str, Any]:
    """A request in a list."""
    return {
        "id": req.id,
        "owner": req.owner.name,
        "state": req.state,
        "title": req.title,
        "created": req.created.isoformat(),
        "updated": req.updated.isoformat(),
    }


def _when(at: datetime | None) -> str | None:
    """A stored time in ISO 8601, UTC (SQLite gives it back naive: it was UTC)."""
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()


def _command_json(run: ops.CommandRun) -> dict[str, Any]:
    """A command job's run: when it started and ended, its exit status (each null when
    not known)."""
    return {"started": _when(run.started), "ended": _when(run.ended), "exit_code": run.exit_code}


class PendingFull(Exception):
    """The caller has as many requests not yet final as ``--max-pending`` allows."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


@router.post(
    "",
    status_code=201,
    openapi_extra=_BODY,
    responses=error_responses(401, 413, 415, 422, 429, 503, refused=True),
)
async def submit(http: HttpRequest, svc: StateDep, caller: CallerDep) -> JSONResponse:
    """Submit a request: XML (STAR's) or YAML by ``Content-Type``. 201 with ``id``,
    ``state``, ``jobs`` and, when the daemon predicts, ``eta`` (as ``GET`` gives it, from
    the simulator over the current queue; null if the prediction failed); 422 with
    ``errors: [{field, reason}]`` (the request is kept, refused, its body cut to
    ``--refused-body-kb``); 413 past ``--max-request-kb`` (the body is read
    only up to the limit); 429 (field ``pending``) when the caller already has
    ``--max-pending`` requests not yet final (nothing is stored)."""
    limit = svc.limits.max_request_bytes
    declared = http.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return _too_large(limit)
    ctype = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in CONTENT_TYPES:
        known = ", ".join(sorted(CONTENT_TYPES))
        return _errors(415, FieldError("Content-Type", f"{ctype or 'none'}: expected {known}"))
    try:
        await run_in_threadpool(_check_pending, svc, caller)
    except PendingFull as exc:
        return await run_in_threadpool(_pending_full, svc, caller, exc.count)
    body = await _read_body(http, limit)
    if body is None:
        return _too_large(limit)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _errors(422, FieldError("body", f"not UTF-8 text: {exc.reason}"))
    try:
        # Parsing, checking and storing block: off the event loop, as sync routes are.
        status, answer = await run_in_threadpool(_accept, svc, caller, text, ctype)
    except ModuleNotFoundError as exc:  # the request language is a part of its own
        return _errors(503, FieldError("server", f"cannot read requests: {exc}"))
    except PendingFull as exc:  # another submission of the caller's got there first
        return await run_in_threadpool(_pending_full, svc, caller, exc.count)
    except ops.UserRemoved:  # removed since their token was checked: as no token
        return _errors(
            401,
            FieldError("Authorization", "a valid token is needed"),
            headers={"WWW-Authenticate": "Bearer"},
        )
    svc.metrics.submitted.labels(answer["state"]).inc()
    if status == 201 and svc.dispatcher is not None:
        svc.dispatcher.wake()
    if status == 201 and svc.eta is not None:
        answer["eta"] = await run_in_threadpool(_eta_at_submission, svc, answer["id"])
    return JSONResponse(answer, status_code=status)


def _eta_at_submission(svc: ServiceState, request_id: str) -> dict[str, Any] | None:
    """The new request's ETA over the current queue (docs/service-whatif.md); None when the
    prediction fails: a submission stands without one."""
    assert svc.eta is not None
    try:
        return svc.eta.submitted(request_id)
    except Exception:
        log.exception("predicting the ETA of %s at its submission failed", request_id)
        return None


async def _read_body(http: HttpRequest, limit: int) -> bytes | None:
    """The body, read as it arrives; None as soon as it passes ``limit`` bytes (the rest is
    never read: the answer closes the connection). A declared ``Content-Length`` is no
    bound: a chunked body has none."""
    body = bytearray()
    async for chunk in http.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(too_large(limit), status_code=413, headers={"Connection": "close"})


def _check_pending(svc: ServiceState, caller: Caller) -> None:
    """Raise :class:`PendingFull` when the caller is at ``--max-pending`` (read before the
    body; checked again, under the caller's lock, when the request is stored)."""
    with svc.store.reading() as s:
        count = ops.open_requests(s, caller.id)
    if count >= svc.limits.max_pending:
        raise PendingFull(count)


PENDING_RETRY_S = 60
"""Retry-After when the daemon predicts no end for the caller's open requests."""


def _pending_full(svc: ServiceState, caller: Caller, count: int) -> JSONResponse:
    """429 naming the field ``pending``; ``Retry-After`` is the soonest predicted end of one
    of the caller's open requests (their ETAs), else a minute."""
    wait = PENDING_RETRY_S
    if svc.eta is not None:
        with svc.store.reading() as s:
            ids = list(
                s.scalars(
                    select(Request.id).where(
                        Request.owner_id == caller.id, Request.state.in_(ops.OPEN)
                    )
                )
            )
        lefts = [
            float(eta["seconds_left"])
            for eta in (svc.eta.eta(i) for i in ids)
            if eta and eta.get("seconds_left") is not None
        ]
        if lefts:
            wait = min(3600, max(1, math.ceil(min(lefts))))
    svc.metrics.submitted.labels("pending-limit").inc()
    reason = (
        f"you have {count} requests not yet final, the limit is {svc.limits.max_pending}; "
        "wait for one to end, or cancel one"
    )
    return _errors(429, FieldError("pending", reason), headers={"Retry-After": str(wait)})


def _accept(svc: ServiceState, caller: Caller, text: str, ctype: str) -> tuple[int, dict[str, Any]]:
    lang = svc.language
    limits = svc.limits
    title = ""
    try:
        mjr = lang.parse(text, CONTENT_TYPES[ctype], caller.name)
        title = mjr.title
        if mjr.username and mjr.username != caller.name and not caller.admin:
            raise RequestInvalid(
                [FieldError("username", f"{mjr.username!r} is not you ({caller.name!r})")]
            )
        # The group a request runs under (its priority in the core's policy) is the user's
        # own: naming another would take that group's priority.
        if mjr.group and mjr.group != caller.group and not caller.admin:
            raise RequestInvalid(
                [FieldError("group", f"{mjr.group!r} is not your group ({caller.group!r})")]
            )
        if not mjr.group and mjr.username in ("", caller.name):
            mjr = replace(mjr, group=caller.group)
        files = lang.check(mjr, svc.catalog)
        request_id = ops.new_request_id()
        jobs = lang.split(mjr, request_id, files, mjr.split or svc.split)
        if not jobs:
            raise RequestInvalid([FieldError("input", "selects no file")])
    except RequestInvalid as exc:
        with svc.store.session() as s:
            req = refused.store_refused(
                s,
                caller,
                text,
                ctype,
                exc.errors,
                title=title,
                body_bytes=limits.refused_body_bytes,
                keep=limits.refused_keep,
            )
            return 422, {"id": req.id, "state": req.state, "errors": req.errors}
    with svc.store.session() as s:
        ops.lock_user(s, caller.id)
        count = ops.open_requests(s, caller.id)
        if count >= limits.max_pending:
            raise PendingFull(count)
        req = ops.store_accepted(s, caller, request_id, text, ctype, mjr, jobs)
        return 201, {"id": req.id, "state": req.state, "jobs": len(jobs)}


MAX_LISTED = 1000
"""The most requests one page of ``GET /requests`` lists."""


@router.get("", responses=error_responses(401, 422, 429))
def list_requests(
    svc: StateDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = MAX_LISTED,
    after: str | None = None,
) -> dict[str, Any]:
    """The caller's requests (an administrator's: everyone's), newest first, at most
    ``limit``; ``after`` (a request id of the caller's, the ``next`` of the page before)
    starts after that request. ``next``: the id to pass as ``after`` for the next page,
    None on the last."""
    with svc.store.reading() as s:
        start = None
        if after is not None:
            start = ops.find_request(s, caller, after)
            if start is None:  # another user's is as unknown as one that does not exist
                raise HTTPException(
                    422, detail={"errors": [{"field": "after", "reason": f"no request {after!r}"}]}
                )
        found = ops.list_requests(s, caller, limit=limit + 1, after=start)
        page = found[:limit]
        more = len(found) > limit
        return {"requests": [summary(r) for r in page], "next": page[-1].id if more else None}


@router.get("/{request_id}", responses=error_responses(401, 404, 429))
def get_request(request_id: str, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """A request: its state, its elementary jobs (node, state, files, progress), its
    progress (events, bytes, packets) and, if refused, its errors."""
    with svc.store.reading() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        done = ops.progress(s, [j.id for j in req.jobs])
        ran_on = ops.packet_nodes(s, [j.id for j in req.jobs])
        runs = ops.command_runs(s, req.jobs)
        jobs: list[dict[str, Any]] = []
        for j in req.jobs:
            total = sum(int(f["n_events"]) for f in j.files)
            node, preferred = ops.job_node(j, ran_on[j.id])
            run = runs.get(j.id)
            jobs.append(
                {
                    "id": j.id,
                    "index": j.index,
                    "kind": "processor" if run is None else "command",
                    "node": node,
                    "preferred_node": preferred,
                    "nodes": ran_on[j.id],
                    "state": j.state,
                    "files": [f["url"] for f in j.files],
                    "failed_file": j.failed_file,
                    # A command reads no events in packets: what it did instead.
                    "progress": {**done[j.id], "events_total": total} if run is None else None,
                    "command": None if run is None else _command_json(run),
                }
            )
        counted = [job["progress"] for job in jobs if job["progress"] is not None]
        keys = ("events", "bytes", "packets", "events_total")
        total_progress = {k: sum(p[k] for p in counted) for k in keys}
        command = bool(jobs) and not counted
        return {
            **summary(req),
            "kind": "command" if command else "processor",
            "policy": req.policy,
            "split": req.split,
            "errors": req.errors,
            "jobs": jobs,
            "progress": None if command else total_progress,
            "eta": svc.eta.eta(req.id) if svc.eta is not None else None,
        }


@router.delete("/{request_id}", responses=error_responses(401, 404, 429))
def cancel(request_id: str, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """Cancel a request: it and its unfinished jobs become ``aborted``."""
    with svc.store.session() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        handed = ops.cancel_request(s, req)
        state = req.state
    for job_id in handed:
        if svc.dispatcher is not None:
            svc.dispatcher.cancel(job_id)
        elif svc.runner is not None:
            svc.runner.cancel(job_id)
    return {"id": request_id, "state": state}


@router.get("/{request_id}/logs", responses=error_responses(401, 404, 429))
def logs(request_id: str, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """Each elementary job's log, and the file that failed, if one did."""
    with svc.store.reading() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        return {
            "id": req.id,
            "state": req.state,
            "errors": req.errors,
            "jobs": [
                {
                    "id": j.id,
                    "state": j.state,
                    "node": j.node,
                    "log": j.log,
                    "failed_file": j.failed_file,
                }
                for j in req.jobs
            ],
        }


@router.get(
    "/{request_id}/result",
    responses={
        200: {
            "description": "The merged result, or with `packets=true` the packets' own "
            "pickles (a pickled list of bytes)",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        },
        **error_responses(401, 404, 409, 422, 429),
    },
)
def result(request_id: str, svc: StateDep, caller: CallerDep, packets: bool = False) -> Response:
    """The merged result (``application/octet-stream``): a pickle made on a worker, served
    as it is; the daemon never unpickles it (``datasched result`` reads it with an
    allow-list). 409 while the request is not completed, while its results are being merged
    (with ``Retry-After``), when they could not be merged (the reason), and for a command's
    request (its outputs are its files). With ``packets=true``: the packets' own results, a
    pickled list of bytes."""
    with svc.store.reading() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        if JobState(req.state) != JobState.COMPLETED and not packets:
            raise _conflict("state", f"the request is {req.state}, not completed")
        job_ids = [j.id for j in req.jobs]
        commands = bool(req.jobs) and all(j.work.get("kind") == "command" for j in req.jobs)
        if packets:
            # Their size first: a request of many packets, each with a large result, would
            # otherwise be read whole into the daemon's memory, twice (the list and its
            # pickle), for one call of its owner's.
            size = int(
                s.scalar(
                    select(func.coalesce(func.sum(func.length(Packet.result)), 0)).where(
                        Packet.job_id.in_(job_ids), Packet.result.is_not(None)
                    )
                )
                or 0
            )
            limit = svc.limits.max_packets_result_bytes
            if size > limit:
                raise _conflict(
                    "packets",
                    f"the packets' results are {size / 1e6:,.1f} MB, more than this "
                    f"daemon serves at once ({limit / 1e6:,.1f} MB: --packets-mb); "
                    "fetch the merged result",
                )
            blobs = [
                b
                for b in s.scalars(
                    select(Packet.result)
                    .where(Packet.job_id.in_(job_ids), Packet.result.is_not(None))
                    .order_by(Packet.job_id, Packet.url, Packet.start)
                )
                if b is not None
            ]
            # A list of bytes pickled here: it holds nothing of the user's but bytes.
            data = pickle.dumps(blobs, protocol=pickle.HIGHEST_PROTOCOL)
            return Response(data, media_type="application/octet-stream")
        if commands:
            raise _conflict(
                "result", "a command's request has no result: its outputs are its files"
            )
        merged = s.scalar(select(Request.result).where(Request.id == req.id))
        error = req.result_error
    if error:
        raise _conflict("result", error)
    if merged is None:
        raise _conflict("result", "its results are being merged; try again shortly", retry_s=2)
    return Response(merged, media_type="application/octet-stream")


def _conflict(field: str, reason: str, retry_s: int | None = None) -> HTTPException:
    headers = {"Retry-After": str(retry_s)} if retry_s is not None else None
    return HTTPException(
        409, detail={"errors": [{"field": field, "reason": reason}]}, headers=headers
    )
