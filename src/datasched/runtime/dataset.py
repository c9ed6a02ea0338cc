"""Datasets: ordered lists of files on (tertiary) storage, events numbered across them.

A dataset's events are numbered 0..N-1 over its files in order, as DESIGN.md's data model
says; a catalog (YAML) names datasets, so jobs can say ``dataset: zmumu``.
"""

from __future__ import annotations

import glob
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import awkward as ak
import fsspec
import uproot
import yaml

__all__ = [
    "CatalogError",
    "Dataset",
    "DatasetError",
    "FileEntry",
    "expand_files",
    "load_catalog",
    "open_dataset",
    "read_events",
]


class DatasetError(ValueError):
    """A file of a dataset is missing or unreadable; the message names it."""


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file, dataset and field."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a dataset: where it is, its tree, its entries and its size."""

    url: str
    tree: str
    n_events: int
    n_bytes: int


@dataclass(frozen=True, slots=True)
class Dataset:
    """An ordered list of files; event ``i`` is entry ``i - offset`` of the file holding it."""

    name: str
    files: tuple[FileEntry, ...]

    @property
    def n_events(self) -> int:
        return sum(f.n_events for f in self.files)

    @property
    def n_bytes(self) -> int:
        return sum(f.n_bytes for f in self.files)

    @property
    def bytes_per_event(self) -> float:
        n = self.n_events
        return self.n_bytes / n if n else 0.0

    def _offsets(self) -> list[int]:
        offsets = [0]
        for f in self.files:
            offsets.append(offsets[-1] + f.n_events)
        return offsets

    def file_range(self, i: int) -> tuple[int, int]:
        """Global events ``[start, stop)`` of file ``i``."""
        offsets = self._offsets()
        return offsets[i], offsets[i + 1]

    def file_index_at(self, event: int) -> int:
        """Index of the file holding global ``event``."""
        if not 0 <= event < self.n_events:
            raise ValueError(f"event {event} outside the dataset [0, {self.n_events})")
        return bisect_right(self._offsets(), event) - 1

    def locate(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``[start, stop)`` as ``(file index, local start, local stop)`` pieces."""
        if not 0 <= start <= stop <= self.n_events:
            raise ValueError(
                f"event range [{start}, {stop}) outside the dataset [0, {self.n_events})"
            )
        offsets = self._offsets()
        out = []
        i = bisect_right(offsets, start) - 1
        while start < stop and i < len(self.files):
            a, b = offsets[i], offsets[i + 1]
            if b > start:
                out.append((i, start - a, min(stop, b) - a))
                start = min(stop, b)
            i += 1
        return out


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _local_path(url: str) -> str:
    return url.removeprefix("file://")


def expand_files(patterns: Sequence[str], base_dir: Path) -> list[str]:
    """Paths (relative to ``base_dir``), globs (sorted) and URLs, in order."""
    out: list[str] = []
    for pattern in patterns:
        if not _is_local(pattern):
            out.append(pattern)
            continue
        path = Path(_local_path(pattern))
        if not path.is_absolute():
            path = base_dir / path
        if glob.has_magic(str(path)):
            matches = sorted(glob.glob(str(path)))
            if not matches:
                raise DatasetError(f"{pattern}: no file matches")
            out.extend(matches)
        elif path.is_file():
            out.append(str(path))
        else:
            raise DatasetError(f"{pattern}: no such file")
    return out


def open_dataset(name: str, urls: Sequence[str], tree: str) -> Dataset:
    """A dataset of ``urls``: entries counted with uproot, sizes from fsspec."""
    files = []
    for url in urls:
        try:
            fs, path = fsspec.core.url_to_fs(url)
            size = int(fs.size(path))
        except FileNotFoundError as exc:
            raise DatasetError(f"{url}: no such file") from exc
        except OSError as exc:
            raise DatasetError(f"{url}: cannot read: {exc}") from exc
        try:
            with uproot.open(url) as f:
                if tree not in f:
                    raise DatasetError(f"{url}: no tree {tree!r}")
                n = int(f[tree].num_entries)
        except DatasetError:
            raise
        except Exception as exc:
            raise DatasetError(f"{url}: not a readable ROOT file: {exc}") from exc
        files.append(FileEntry(url, tree, n, size))
    return Dataset(name, tuple(files))


def load_catalog(path: Path) -> dict[str, Dataset]:
    """Datasets of a YAML catalog: ``datasets: {name: {tree:, files: [...]}}``; each file is
    a path (relative to the catalog), a glob, a URL, or ``{url:, n_events:, n_bytes:}``
    (counts given: the file is not opened)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise CatalogError(f"{path}: no such catalog") from exc
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping) or not isinstance(doc.get("datasets"), Mapping):
        raise CatalogError(f"{path}: field 'datasets': missing or not a mapping")
    out: dict[str, Dataset] = {}
    for name, spec in doc["datasets"].items():
        where = f"{path.name}: dataset {name!r}"
        if not isinstance(spec, Mapping):
            raise CatalogError(f"{where}: not a mapping")
        tree = spec.get("tree")
        if not isinstance(tree, str) or not tree:
            raise CatalogError(f"{where}: field 'tree': missing")
        files = spec.get("files")
        if not isinstance(files, list) or not files:
            raise CatalogError(f"{where}: field 'files': missing or empty")
        out[str(name)] = _catalog_dataset(str(name), tree, files, path.parent, where)
    return out


def _catalog_dataset(name: str, tree: str, files: list[Any], base: Path, where: str) -> Dataset:
    entries: list[FileEntry] = []
    plain: list[str] = []
    for i, item in enumerate(files):
        if isinstance(item, str):
            plain.append(item)
            continue
        if not isinstance(item, Mapping) or "url" not in item:
            raise CatalogError(f"{where}: field 'files' #{i}: expected a path or {{url: ...}}")
        url = str(item["url"])
        if _is_local(url) and not Path(_local_path(url)).is_absolute():
            url = str(base / _local_path(url))
        try:
            n, size = int(item["n_events"]), int(item["n_bytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(
                f"{where}: field 'files' #{i}: n_events and n_bytes must be whole numbers"
            ) from exc
        if n < 0 or size < 0:
            raise CatalogError(f"{where}: field 'files' #{i}: counts must not be negative")
        entries.append(FileEntry(url, tree, n, size))
    if plain:
        try:
            opened = open_dataset(name, expand_files(plain, base), tree)
        except DatasetError as exc:
            raise CatalogError(f"{where}: field 'files': {exc}") from exc
        entries.extend(opened.files)
    return Dataset(name, tuple(entries))


def read_events(
    url: str, tree: str, start: int, stop: int, columns: Sequence[str] | None = None
) -> ak.Array:
    """Entries ``[start, stop)`` of one file as an awkward array (ROOT via uproot, or
    Parquet)."""
    if url.endswith(".parquet"):
        arr = ak.from_parquet(url, columns=list(columns) if columns else None)
        return arr[start:stop]
    with uproot.open(url) as f:
        return f[tree].arrays(
            list(columns) if columns else None,
            entry_start=start,
            entry_stop=stop,
            library="ak",
        )
