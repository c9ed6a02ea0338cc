"""The daemon's port to the request language (:mod:`datasched.service.request`): parse a
request's text, check it against the catalog and the configured roots (which gives its
files), split it into elementary jobs. :class:`RequestLanguage` is what the API calls;
:class:`ContractLanguage` is the request package behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from datasched.service.contracts import (
    CatalogLookup,
    ElementaryJob,
    FieldError,
    FileRef,
    MetaJobRequest,
    ProcessorWork,
    RequestInvalid,
    SplitStrategy,
)

__all__ = ["ContractLanguage", "RequestLanguage"]

MIME = {"xml": "application/xml", "yaml": "application/yaml"}
"""The API's content kinds as the request package's media types."""


class RequestLanguage(Protocol):
    """Parse, check and split requests; each raises
    :class:`~datasched.service.contracts.RequestInvalid` with every problem found."""

    def parse(self, text: str, content_type: str, username: str) -> MetaJobRequest: ...

    def check(self, request: MetaJobRequest, catalog: CatalogLookup) -> list[FileRef]: ...

    def split(
        self,
        request: MetaJobRequest,
        request_id: str,
        files: Sequence[FileRef],
        strategy: SplitStrategy,
    ) -> list[ElementaryJob]: ...


class ContractLanguage:
    """:class:`RequestLanguage` by :mod:`datasched.service.request`. ``roots`` are the
    directories that paths in requests must lie under; ``cache_holders`` (optional) tells
    the ``by-cache`` split which nodes cache each file now; ``max_files_per_job`` is the
    administrator's cap; ``count_events`` counts the events of a file the catalog does not
    know (None: such a file is refused for a processor; the daemon's counts in a sandbox:
    :class:`~datasched.service.usercode.SandboxCounter`); ``user_dirs``: outputs go under
    each user's own directory of a root; ``code_check``: the check of a processor that
    needs its code, which runs it in a sandbox
    (:class:`~datasched.service.usercode.SandboxCheck`). The daemon never imports a
    processor."""

    def __init__(
        self,
        roots: Sequence[Path] = (),
        *,
        cache_holders: Callable[[], Mapping[str, Sequence[str]]] | None = None,
        max_files_per_job: int | None = None,
        count_events: Callable[[str, str | None], int] | None = None,
        user_dirs: bool = False,
        code_check: Callable[[ProcessorWork], FieldError | None] | None = None,
    ) -> None:
        self.roots = tuple(roots)
        self.user_dirs = user_dirs
        self.code_check = code_check
        self.cache_holders = cache_holders
        self.max_files_per_job = max_files_per_job
        self.count_events = count_events

    def parse(self, text: str, content_type: str, username: str) -> MetaJobRequest:
        from datasched.service.request import parse_request

        mjr = parse_request(text, MIME.get(content_type, content_type))
        return mjr if mjr.username else replace(mjr, username=username)

    def check(self, request: MetaJobRequest, catalog: CatalogLookup) -> list[FileRef]:
        from datasched.service.request import check_request

        files, errors = check_request(
            request,
            catalog,
            roots=self.roots,
            count_events=self.count_events,
            user_dirs=self.user_dirs,
            code_check=self.code_check,
        )
        if errors:
            raise RequestInvalid(errors)
        return files

    def split(
        self,
        request: MetaJobRequest,
        request_id: str,
        files: Sequence[FileRef],
        strategy: SplitStrategy,
    ) -> list[ElementaryJob]:
        from datasched.service.request import split_request

        holders = self.cache_holders() if self.cache_holders is not None else None
        return split_request(
            request_id,
            request,
            files,
            strategy,
            cache_holders=holders,
            max_files_per_job=self.max_files_per_job,
        )
