"""Refused requests, kept bounded: their owner reads why they were refused, but a hostile
user cannot fill the store with them (each body cut, their errors capped, each user's kept
to a number, and all of them to a retention period: docs/service.md, "Limits")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from datasched.service.contracts import FieldError, JobState
from datasched.service.store.models import Request
from datasched.service.store.ops import lock_user, new_request_id
from datasched.service.users import Caller

__all__ = [
    "MAX_ERRORS_KEPT",
    "MAX_REASON_CHARS",
    "clip_body",
    "clip_errors",
    "prune_refused",
    "store_refused",
    "sweep_refused",
]

MAX_ERRORS_KEPT = 100
"""Errors of a refused request kept and answered; past them one more says how many were cut."""
MAX_REASON_CHARS = 1000
"""Characters of an error's field and of its reason kept (a reason may quote the input)."""


def clip_body(raw: str, max_bytes: int) -> str:
    """``raw`` cut to its first ``max_bytes`` bytes of UTF-8 (never inside a character),
    followed, when cut, by a line saying how many bytes were not kept."""
    data = raw.encode("utf-8")
    if len(data) <= max_bytes:
        return raw
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    cut = len(data) - len(kept.encode("utf-8"))
    return f"{kept}\n[datasched: {cut} more bytes of this refused request were not kept]\n"


def _clip(text: str) -> str:
    if len(text) <= MAX_REASON_CHARS:
        return text
    return f"{text[:MAX_REASON_CHARS]}... ({len(text) - MAX_REASON_CHARS} more characters)"


def clip_errors(errors: Sequence[FieldError]) -> list[dict[str, str]]:
    """The errors as kept and answered: at most :data:`MAX_ERRORS_KEPT`, each field and
    reason at most :data:`MAX_REASON_CHARS` characters (a hostile request can make as many
    errors as it has lines, each quoting its input)."""
    out = [{"field": _clip(e.field), "reason": _clip(e.reason)} for e in errors[:MAX_ERRORS_KEPT]]
    if len(errors) > MAX_ERRORS_KEPT:
        more = len(errors) - MAX_ERRORS_KEPT
        out.append({"field": "errors", "reason": f"{more} more errors not shown"})
    return out


def store_refused(
    s: Session,
    caller: Caller,
    raw: str,
    content_type: str,
    errors: Sequence[FieldError],
    *,
    title: str = "",
    body_bytes: int | None = None,
    keep: int | None = None,
) -> Request:
    """Keep a refused request with its errors, so that its owner can read why: its body
    cut to ``body_bytes`` (None: whole), and the caller's refused requests pruned to the
    ``keep`` newest, this one included (None: all kept)."""
    if keep is not None:
        lock_user(s, caller.id)
    req = Request(
        id=new_request_id(),
        owner_id=caller.id,
        state=JobState.REFUSED.value,
        raw=raw if body_bytes is None else clip_body(raw, body_bytes),
        content_type=content_type,
        title=title[:256],
        errors=clip_errors(errors),
    )
    s.add(req)
    s.flush()
    if keep is not None:
        prune_refused(s, caller.id, keep, spare=req.id)
    return req


def _refused_alone() -> Any:
    """Refused requests with no job (a refused request never has one: this guards the
    deletes below against a request whose state was ever changed)."""
    return (Request.state == JobState.REFUSED.value) & ~Request.jobs.any()


def prune_refused(s: Session, owner_id: int, keep: int, *, spare: str | None = None) -> int:
    """Delete the user's refused requests but the ``keep`` newest (``spare``, the one just
    stored, always stays and counts as one). Returns how many were deleted."""
    others = max(keep - (1 if spare is not None else 0), 0)
    q = select(Request.id).where(Request.owner_id == owner_id, _refused_alone())
    if spare is not None:
        q = q.where(Request.id != spare)
    old = q.order_by(Request.created.desc(), Request.id.desc()).offset(others)
    # A subquery, not the ids: it also works when a lower --refused-keep leaves many.
    gone = s.execute(
        delete(Request)
        .where(Request.id.in_(select(old.subquery().c.id)))
        .execution_options(synchronize_session=False)
    )
    return int(getattr(gone, "rowcount", 0) or 0)


def sweep_refused(s: Session, older_than: datetime) -> int:
    """Delete every refused request stored before ``older_than`` (an aware UTC time).
    Returns how many."""
    gone = s.execute(
        delete(Request)
        .where(_refused_alone(), Request.created < older_than)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(gone, "rowcount", 0) or 0)
