"""``/api/v1/requests``: submit a meta-job request (XML or YAML), list the caller's, read
one (state, elementary jobs, progress), cancel it, read its logs and its merged result."""

from __future__ import annotations

import pickle
from typing import Any

from fastapi import APIRouter, HTTPException, Response
from fastapi import Request as HttpRequest
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import select

from datasched.service.api.deps import CallerDep, ServiceState, StateDep, not_found
from datasched.service.contracts import FieldError, JobState, RequestInvalid
from datasched.service.store import ops
from datasched.service.store.models import Packet, Request
from datasched.service.users import Caller

__all__ = ["router"]

router = APIRouter(prefix="/requests", tags=["requests"])

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


def _errors(status: int, *errors: FieldError, **extra: Any) -> JSONResponse:
    return JSONResponse(
        {**extra, "errors": [e.as_dict() for e in errors]},
        status_code=status,
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


@router.post("", status_code=201, openapi_extra=_BODY)
async def submit(http: HttpRequest, svc: StateDep, caller: CallerDep) -> JSONResponse:
    """Submit a request: XML (STAR's) or YAML by ``Content-Type``. 201 with ``id`` and
    ``state``; 422 with ``errors: [{field, reason}]`` (the request is kept, refused)."""
    declared = http.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > svc.limits.max_request_bytes:
        return _too_large(svc.limits.max_request_bytes)
    body = await http.body()
    if len(body) > svc.limits.max_request_bytes:
        return _too_large(svc.limits.max_request_bytes)
    ctype = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in CONTENT_TYPES:
        known = ", ".join(sorted(CONTENT_TYPES))
        return _errors(415, FieldError("Content-Type", f"{ctype or 'none'}: expected {known}"))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _errors(422, FieldError("body", f"not UTF-8 text: {exc.reason}"))
    try:
        # Parsing, checking and storing block: off the event loop, as sync routes are.
        status, answer = await run_in_threadpool(_accept, svc, caller, text, ctype)
    except ModuleNotFoundError as exc:  # the request language is a part of its own
        return _errors(503, FieldError("server", f"cannot read requests: {exc}"))
    svc.metrics.submitted.labels(answer["state"]).inc()
    if status == 201 and svc.dispatcher is not None:
        svc.dispatcher.wake()
    return JSONResponse(answer, status_code=status)


def _too_large(limit: int) -> JSONResponse:
    return _errors(413, FieldError("body", f"larger than the limit of {limit} bytes"))


def _accept(svc: ServiceState, caller: Caller, text: str, ctype: str) -> tuple[int, dict[str, Any]]:
    lang = svc.language
    title = ""
    try:
        mjr = lang.parse(text, CONTENT_TYPES[ctype], caller.name)
        title = mjr.title
        if mjr.username and mjr.username != caller.name and not caller.admin:
            raise RequestInvalid(
                [FieldError("username", f"{mjr.username!r} is not you ({caller.name!r})")]
            )
        files = lang.check(mjr, svc.catalog)
        request_id = ops.new_request_id()
        jobs = lang.split(mjr, request_id, files, mjr.split or svc.split)
        if not jobs:
            raise RequestInvalid([FieldError("input", "selects no file")])
    except RequestInvalid as exc:
        with svc.store.session() as s:
            req = ops.store_refused(s, caller, text, ctype, exc.errors, title=title)
            return 422, {"id": req.id, "state": req.state, "errors": req.errors}
    with svc.store.session() as s:
        req = ops.store_accepted(s, caller, request_id, text, ctype, mjr, jobs)
        return 201, {"id": req.id, "state": req.state, "jobs": len(jobs)}


@router.get("")
def list_requests(svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """The caller's requests (an administrator's: everyone's), newest first."""
    with svc.store.reading() as s:
        return {"requests": [summary(r) for r in ops.list_requests(s, caller)]}


@router.get("/{request_id}")
def get_request(request_id: str, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """A request: its state, its elementary jobs (node, state, files, progress), its
    progress (events, bytes, packets) and, if refused, its errors."""
    with svc.store.reading() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        done = ops.progress(s, [j.id for j in req.jobs])
        ran_on = ops.packet_nodes(s, [j.id for j in req.jobs])
        jobs: list[dict[str, Any]] = []
        for j in req.jobs:
            total = sum(int(f["n_events"]) for f in j.files)
            node, preferred = ops.job_node(j, ran_on[j.id])
            jobs.append(
                {
                    "id": j.id,
                    "index": j.index,
                    "node": node,
                    "preferred_node": preferred,
                    "nodes": ran_on[j.id],
                    "state": j.state,
                    "files": [f["url"] for f in j.files],
                    "failed_file": j.failed_file,
                    "progress": {**done[j.id], "events_total": total},
                }
            )
        keys = ("events", "bytes", "packets", "events_total")
        total_progress = {k: sum(job["progress"][k] for job in jobs) for k in keys}
        return {
            **summary(req),
            "policy": req.policy,
            "split": req.split,
            "errors": req.errors,
            "jobs": jobs,
            "progress": total_progress,
            "eta": svc.eta.eta(req.id) if svc.eta is not None else None,
        }


@router.delete("/{request_id}")
def cancel(request_id: str, svc: StateDep, caller: CallerDep) -> dict[str, Any]:
    """Cancel a request: it and its unfinished jobs become ``aborted``."""
    with svc.store.session() as s:
        req = ops.find_request(s, caller, request_id)
        if req is None:
            raise not_found(request_id)
        handed = ops.cancel_request(s, req)
        state = req.state
    if svc.runner is not None:
        for job_id in handed:
            svc.runner.cancel(job_id)
    return {"id": request_id, "state": state}


@router.get("/{request_id}/logs")
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


@router.get("/{request_id}/result")
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
