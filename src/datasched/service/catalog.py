"""The file catalog (STAR's file catalog, as the meta-job paper uses it): datasets with
their metadata (run year, collision system, beam energy, detector and trigger
configuration, free keywords) and their files (events, bytes, where they are kept, which
node caches hold them), kept in the store.

Queries are terms joined by AND: ``key=value``; ``key>=v``, ``key<=v`` (and ``>``, ``<``)
for the numeric keys; a bare word is a free keyword the dataset must carry. An unknown key
is an error naming it. Fed by importing a YAML catalog (the runtime's format,
:func:`datasched.runtime.dataset.load_catalog`) or by scanning storage (fsspec, entries
counted with uproot as the runtime does).
"""

from __future__ import annotations

import operator
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from datasched.service.contracts import FileRef
from datasched.service.store.db import Store
from datasched.service.store.models import CatalogDataset, CatalogFile

__all__ = [
    "NUMERIC_KEYS",
    "TEXT_KEYS",
    "Catalog",
    "CatalogQueryError",
    "DatasetInfo",
    "parse_query",
    "split_meta",
]

NUMERIC_KEYS = {"year": "year", "energy": "energy_gev"}
"""Numeric keys of a query and the column each reads."""
TEXT_KEYS = {
    "dataset": "name",
    "name": "name",
    "system": "system",
    "detector": "detector",
    "trigger": "trigger",
    "keyword": "keywords",
}
"""Text keys of a query (compared without case) and the column each reads."""
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(>=|<=|=|>|<)(.*)$")
_META_KEYS = {"year", "system", "energy", "energy_gev", "beam_energy", "detector", "trigger"}


class CatalogQueryError(ValueError):
    """A query that cannot be read; the message names the term and the reason."""


@dataclass(frozen=True, slots=True)
class Term:
    """One term of a query: ``key op value``, or a free keyword (``key`` None)."""

    key: str | None
    op: str
    value: str | float


def parse_query(query: str) -> list[Term]:
    """The terms of ``query``; :class:`CatalogQueryError` naming a bad one."""
    try:
        words = shlex.split(query)
    except ValueError as exc:
        raise CatalogQueryError(f"query: {exc}") from exc
    terms = []
    for word in words:
        m = _TERM.match(word)
        if m is None:
            terms.append(Term(None, "=", word.lower()))
            continue
        key, op, value = m.group(1).lower(), m.group(2), m.group(3)
        if key in NUMERIC_KEYS:
            try:
                terms.append(Term(key, op, float(value)))
            except ValueError:
                raise CatalogQueryError(
                    f"query: {word!r}: {key} is a number, got {value!r}"
                ) from None
        elif key in TEXT_KEYS:
            if op != "=":
                raise CatalogQueryError(f"query: {word!r}: {key} takes only '='")
            terms.append(Term(key, op, value.lower()))
        else:
            known = ", ".join(sorted({*NUMERIC_KEYS, *TEXT_KEYS}))
            raise CatalogQueryError(f"query: unknown key {key!r} (known: {known})")
    return terms


def _matches(d: CatalogDataset, terms: Sequence[Term]) -> bool:
    keywords = {str(k).lower() for k in d.keywords or ()}
    for t in terms:
        if t.key is None or t.key == "keyword":
            if t.value not in keywords:
                return False
            continue
        if t.key in NUMERIC_KEYS:
            have = getattr(d, NUMERIC_KEYS[t.key])
            if have is None or not _OPS[t.op](float(have), t.value):
                return False
            continue
        have = getattr(d, TEXT_KEYS[t.key])
        if have is None or str(have).lower() != t.value:
            return False
    return True


def split_meta(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset's metadata as the catalog's columns (``year``, ``system``, ``energy_gev``,
    ``detector``, ``trigger``, ``keywords``) and ``extra`` (the rest)."""
    out: dict[str, Any] = {"extra": {}}
    for key, value in metadata.items():
        if key == "year":
            out["year"] = int(value)
        elif key in ("energy", "energy_gev", "beam_energy"):
            out["energy_gev"] = float(value)
        elif key in _META_KEYS:
            out[key] = str(value)
        elif key == "keywords":
            out["keywords"] = value.split() if isinstance(value, str) else [str(v) for v in value]
        else:
            out["extra"][str(key)] = value
    return out


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset as the API and the CLI show it."""

    name: str
    metadata: Mapping[str, Any]
    n_files: int
    n_events: int
    n_bytes: int


def _info(d: CatalogDataset) -> DatasetInfo:
    meta: dict[str, Any] = {
        k: getattr(d, k)
        for k in ("year", "system", "energy_gev", "detector", "trigger")
        if getattr(d, k) is not None
    }
    if d.keywords:
        meta["keywords"] = list(d.keywords)
    meta.update(d.extra or {})
    return DatasetInfo(
        d.name,
        meta,
        len(d.files),
        sum(f.n_events for f in d.files),
        sum(f.n_bytes for f in d.files),
    )


def _ref(f: CatalogFile) -> FileRef:
    return FileRef(
        url=f.url,
        n_events=f.n_events,
        n_bytes=f.n_bytes,
        tree=f.tree,
        dataset=f.dataset.name,
        cached_on=tuple(f.cached_on or ()),
    )


class Catalog:
    """The catalog in a store; a :class:`~datasched.service.contracts.CatalogLookup`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def datasets(self, query: str = "") -> list[DatasetInfo]:
        """The datasets matching ``query`` (all for an empty one), by name."""
        terms = parse_query(query)
        with self.store.reading() as s:
            rows = s.scalars(select(CatalogDataset).order_by(CatalogDataset.name))
            return [_info(d) for d in rows if _matches(d, terms)]

    def query(self, query: str) -> list[FileRef]:
        """The files of the datasets matching ``query``, dataset by dataset, in order."""
        terms = parse_query(query)
        with self.store.reading() as s:
            rows = s.scalars(select(CatalogDataset).order_by(CatalogDataset.name))
            return [_ref(f) for d in rows if _matches(d, terms) for f in d.files]

    def file(self, url: str) -> FileRef | None:
        with self.store.reading() as s:
            f = s.scalar(select(CatalogFile).where(CatalogFile.url == url))
            return _ref(f) if f is not None else None

    def put(
        self,
        name: str,
        files: Sequence[FileRef],
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Add dataset ``name`` with its files, or replace it (its files and metadata)."""
        cols = split_meta(metadata or {})
        with self.store.session() as s:
            old = s.scalar(select(CatalogDataset).where(CatalogDataset.name == name))
            if old is not None:
                s.delete(old)
                s.flush()
            d = CatalogDataset(name=name, keywords=cols.pop("keywords", []), **cols)
            s.add(d)
            for f in files:
                d.files.append(
                    CatalogFile(
                        url=f.url,
                        tree=f.tree,
                        n_events=f.n_events,
                        n_bytes=f.n_bytes,
                        cached_on=list(f.cached_on),
                    )
                )

    def import_yaml(self, path: Path) -> list[str]:
        """Import the datasets of a YAML catalog (the runtime's format; a dataset's
        ``metadata`` gives its year, system, energy, detector, trigger and keywords);
        their names."""
        from datasched.runtime.dataset import load_catalog

        datasets = load_catalog(path)
        for name, ds in datasets.items():
            refs = [FileRef(f.url, f.n_events, f.n_bytes, f.tree, name) for f in ds.files]
            self.put(name, refs, ds.metadata)
        return list(datasets)

    def scan(
        self,
        url: str,
        *,
        dataset: str | None = None,
        tree: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[str, int]:
        """Walk ``url`` (a directory, a glob, or a file; any fsspec URL) for ROOT files,
        count their entries and add them as dataset ``dataset`` (default: the last part of
        the URL). Returns the dataset's name and its number of files."""
        from datasched.runtime.dataset import DatasetError, open_dataset

        urls = _walk(url)
        if not urls:
            raise DatasetError(f"{url}: no ROOT file found")
        name = dataset or url.rstrip("/").rsplit("/", 1)[-1].split("*")[0] or "dataset"
        ds = open_dataset(name, urls, tree or _only_tree(urls[0]), metadata=metadata)
        refs = [FileRef(f.url, f.n_events, f.n_bytes, f.tree, name) for f in ds.files]
        self.put(name, refs, metadata)
        return name, len(refs)


def _walk(url: str) -> list[str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    if any(c in path for c in "*?["):
        found = fs.glob(path)
    elif fs.isdir(path):
        found = fs.find(path)
    else:
        found = [path] if fs.exists(path) else []
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    names = sorted(str(p) for p in found if str(p).endswith(".root"))
    if protocol in ("file", "local"):
        return names
    return [fs.unstrip_protocol(p) for p in names]


def _only_tree(url: str) -> str:
    """The one tree of a file (scan without ``--tree``)."""
    from datasched.runtime.dataset import DatasetError
    from datasched.runtime.events import open_remote

    with open_remote(url) as f:
        trees = sorted({k.split(";")[0] for k, c in f.classnames().items() if c == "TTree"})
    if len(trees) != 1:
        have = ", ".join(trees) or "none"
        raise DatasetError(f"{url}: give --tree: the file holds {len(trees)} trees ({have})")
    return str(trees[0])
