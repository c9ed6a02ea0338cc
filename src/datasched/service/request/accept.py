"""A submitted request, from its text to its elementary jobs, in the order the service takes
them (the paper's §2: analysed, validated by syntactic then semantic rules, then split by
the administrator's policy): one call for the daemon's ``POST /api/v1/requests``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from datasched.service.contracts import (
    CatalogLookup,
    ElementaryJob,
    FieldError,
    MetaJobRequest,
    RequestInvalid,
    SplitStrategy,
)
from datasched.service.request.checks import EventCounter, check_request
from datasched.service.request.parse import MAX_REQUEST_BYTES, parse_request
from datasched.service.request.split import split_request

__all__ = ["accept_request"]


def accept_request(
    request_id: str,
    text: str | bytes,
    content_type: str,
    catalog: CatalogLookup | None,
    *,
    user: str,
    roots: Sequence[Path],
    default_split: SplitStrategy = SplitStrategy.BY_POLICY,
    cache_holders: Mapping[str, Sequence[str]] | None = None,
    max_files_per_job: int | None = None,
    max_bytes: int = MAX_REQUEST_BYTES,
    allow_shell: bool = False,
    search_path: str | None = None,
    count_events: EventCounter | None = None,
) -> tuple[MetaJobRequest, list[ElementaryJob]]:
    """The request of ``user`` (the caller, as the token says) and its elementary jobs, or
    :class:`RequestInvalid` with every problem. A request naming no user is the caller's;
    one naming another user is refused (``username``). The processor is looked for, never
    loaded: user code runs on the workers only. The split is the request's own, else
    ``default_split``."""
    mjr = parse_request(text, content_type, max_bytes=max_bytes)
    errors: list[FieldError] = []
    if not mjr.username:
        mjr = replace(mjr, username=user)
    elif mjr.username != user:
        errors.append(
            FieldError("username", f"the request is for {mjr.username!r}, the caller is {user!r}")
        )
    files, problems = check_request(
        mjr,
        catalog,
        roots=roots,
        allow_shell=allow_shell,
        search_path=search_path,
        count_events=count_events,
    )
    errors.extend(problems)
    if errors:
        raise RequestInvalid(errors)
    jobs = split_request(
        request_id,
        mjr,
        files,
        mjr.split or default_split,
        cache_holders=cache_holders,
        max_files_per_job=max_files_per_job,
    )
    return mjr, jobs
