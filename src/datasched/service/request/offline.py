"""A catalog for checking requests offline: the datasets of a catalog file (as
``datasched run`` reads it, :func:`datasched.runtime.dataset.load_catalog`) answering the
queries of requests. The service's own catalog (datasets with metadata, scanned or
imported) answers the same two questions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from datasched.service.contracts import FileRef

if TYPE_CHECKING:
    from datasched.runtime.dataset import Dataset

__all__ = ["DatasetsCatalog"]


class DatasetsCatalog:
    """Answers ``query`` and ``file`` from datasets by name. A query is words separated by
    spaces, all of which a dataset must match: ``key=value`` (``dataset=NAME`` or ``name=``
    for its name, any other key for its metadata, compared as text) or a bare keyword (its
    name, or one of its metadata's ``keywords``)."""

    def __init__(self, datasets: Mapping[str, Dataset]) -> None:
        self._datasets = dict(sorted(datasets.items()))
        self._files: dict[str, FileRef] = {}
        for name, ds in self._datasets.items():
            for f in ds.files:
                ref = FileRef(f.url, f.n_events, f.n_bytes, f.tree, name)
                self._files.setdefault(f.url, ref)
                if "://" not in f.url:
                    self._files.setdefault(str(Path(f.url).resolve()), ref)

    def _matches(self, name: str, ds: Dataset, term: str) -> bool:
        key, sep, value = term.partition("=")
        if not sep:
            keywords = ds.metadata.get("keywords", ())
            return term == name or (isinstance(keywords, list | tuple) and term in keywords)
        if key in ("dataset", "name"):
            return value == name
        return key in ds.metadata and str(ds.metadata[key]) == value

    def query(self, query: str) -> list[FileRef]:
        terms = query.split()
        if not terms:
            raise ValueError("an empty query")
        for term in terms:
            key, sep, value = term.partition("=")
            if sep and (not key or not value):
                raise ValueError(f"{term!r}: expected key=value")
            if (
                sep
                and key not in ("dataset", "name")
                and not any(key in ds.metadata for ds in self._datasets.values())
            ):
                raise ValueError(f"{key!r}: no dataset has this keyword")
        out: list[FileRef] = []
        for name, ds in self._datasets.items():
            if all(self._matches(name, ds, t) for t in terms):
                out.extend(FileRef(f.url, f.n_events, f.n_bytes, f.tree, name) for f in ds.files)
        return out

    def file(self, url: str) -> FileRef | None:
        return self._files.get(url)
