"""The daemon's ports to the request language (:mod:`datasched.service.request`): parse a
request's text, check it against the catalog and the configured roots, split it into
elementary jobs. :class:`RequestLanguage` is what the API calls; :class:`ContractLanguage`
reaches the request package through the names of the contract
(``parse_request``/``check_request``/``split_request``), imported when first used.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from datasched.service.contracts import (
    CatalogLookup,
    ElementaryJob,
    MetaJobRequest,
    SplitStrategy,
)

__all__ = ["ContractLanguage", "RequestLanguage"]


class RequestLanguage(Protocol):
    """Parse, check and split requests; each raises
    :class:`~datasched.service.contracts.RequestInvalid` with every problem found."""

    def parse(self, text: str, content_type: str, username: str) -> MetaJobRequest: ...

    def check(self, request: MetaJobRequest, catalog: CatalogLookup) -> None: ...

    def split(
        self,
        request: MetaJobRequest,
        request_id: str,
        catalog: CatalogLookup,
        strategy: SplitStrategy,
    ) -> list[ElementaryJob]: ...


class ContractLanguage:
    """:class:`RequestLanguage` by :mod:`datasched.service.request`'s functions; ``roots``
    are the directories paths in requests are confined to. The calls made:
    ``parse_request(text, content_type="xml" | "yaml", username=...)``,
    ``check_request(request, catalog=..., roots=...)`` and ``split_request(request,
    request_id=..., catalog=..., strategy=...)``; each raises ``RequestInvalid``."""

    def __init__(self, roots: Sequence[Path] = ()) -> None:
        self.roots = tuple(roots)

    @staticmethod
    def _fn(name: str) -> Any:
        return getattr(importlib.import_module("datasched.service.request"), name)

    def parse(self, text: str, content_type: str, username: str) -> MetaJobRequest:
        result: MetaJobRequest = self._fn("parse_request")(
            text, content_type=content_type, username=username
        )
        return result

    def check(self, request: MetaJobRequest, catalog: CatalogLookup) -> None:
        self._fn("check_request")(request, catalog=catalog, roots=self.roots)

    def split(
        self,
        request: MetaJobRequest,
        request_id: str,
        catalog: CatalogLookup,
        strategy: SplitStrategy,
    ) -> list[ElementaryJob]:
        jobs: list[ElementaryJob] = self._fn("split_request")(
            request, request_id=request_id, catalog=catalog, strategy=strategy
        )
        return list(jobs)
