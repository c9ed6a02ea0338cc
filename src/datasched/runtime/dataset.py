"""Datasets: ordered lists of files on (tertiary) storage, events numbered across them.

A dataset's events are numbered 0..N-1 over its files in order, as docs/design.md's data model
says ("a dataset maps event ranges to files"); the core schedules event ranges and the runtime
uses :meth:`Dataset.locate` to turn a range back into (file, local entries) pieces. A catalog
(YAML) names datasets, so jobs can say ``dataset: zmumu``; a coffea fileset (``{dataset:
{"files": {path: tree}, "metadata": {...}}}``, in a jobs file, or a JSON or YAML file of one)
names them too, each file with its tree.
"""

from __future__ import annotations

import glob
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import awkward as ak
import fsspec
import yaml

from datasched.runtime.events import open_remote

__all__ = [
    "CatalogError",
    "Dataset",
    "DatasetError",
    "FileEntry",
    "Skipped",
    "expand_files",
    "fileset_datasets",
    "load_catalog",
    "open_dataset",
    "read_events",
    "read_yaml",
    "yaml_problem",
]

CATALOG_DATASET_KEYS = frozenset({"tree", "files", "metadata", "treename"})
FILESET_DATASET_KEYS = frozenset({"files", "treename", "metadata"})

Skipped = list[tuple[str, str]]
"""Files left out because they cannot be read (``--skip-bad-files``): ``(url, reason)``."""
CATALOG_FILE_KEYS = frozenset({"url", "n_events", "n_bytes"})


class DatasetError(ValueError):
    """A file of a dataset is missing or unreadable; the message names it and the reason."""


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file, dataset and field."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a dataset: where it is (fsspec URL or path), its tree, entries and size."""

    url: str
    tree: str
    n_events: int
    n_bytes: int

    def __post_init__(self) -> None:
        for name in ("n_events", "n_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{self.url}: field {name!r}: expected an int >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Dataset:
    """An ordered list of files; global event ``i`` is entry ``i - offset`` of the file that
    holds it, where ``offset`` is the number of events in the files before it."""

    name: str
    files: tuple[FileEntry, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """The dataset's own metadata (a coffea fileset's ``metadata``), given to processors."""
    _offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Cumulative event counts: file ``i`` holds global events ``[_offsets[i], _offsets[i+1])``."""

    def __post_init__(self) -> None:
        offsets = [0]
        for f in self.files:
            offsets.append(offsets[-1] + f.n_events)
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "_offsets", tuple(offsets))

    @property
    def n_events(self) -> int:
        """Events in the whole dataset."""
        return self._offsets[-1]

    @property
    def n_bytes(self) -> int:
        """Bytes of all its files on storage."""
        return sum(f.n_bytes for f in self.files)

    @property
    def bytes_per_event(self) -> float:
        """Mean bytes per event (0 for an empty dataset): the cost model's data size."""
        n = self.n_events
        return self.n_bytes / n if n else 0.0

    def file_range(self, i: int) -> tuple[int, int]:
        """Global events ``[start, stop)`` of file ``i``."""
        if not 0 <= i < len(self.files):
            raise IndexError(
                f"dataset {self.name!r}: file index {i} outside [0, {len(self.files)})"
            )
        return self._offsets[i], self._offsets[i + 1]

    def file_index_at(self, event: int) -> int:
        """Index of the file holding global ``event`` (empty files hold none)."""
        if not 0 <= event < self.n_events:
            raise ValueError(
                f"dataset {self.name!r}: event {event} outside the dataset [0, {self.n_events})"
            )
        return bisect_right(self._offsets, event) - 1

    def locate(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """The global range ``[start, stop)`` as ``(file index, local start, local stop)``
        pieces in order; empty files and an empty range give no pieces."""
        if not 0 <= start <= stop <= self.n_events:
            raise ValueError(
                f"dataset {self.name!r}: event range [{start}, {stop}) outside the dataset "
                f"[0, {self.n_events})"
            )
        if start == stop:
            return []
        offsets = self._offsets
        first = bisect_right(offsets, start) - 1
        last = bisect_right(offsets, stop - 1) - 1
        out = []
        for i in range(first, last + 1):
            a, b = max(start, offsets[i]), min(stop, offsets[i + 1])
            if a < b:
                out.append((i, a - offsets[i], b - offsets[i]))
        return out


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _local_path(url: str) -> str:
    return url.removeprefix("file://")


def expand_files(patterns: Sequence[str], base_dir: Path) -> list[str]:
    """Local paths (relative ones against ``base_dir``) and globs (expanded, sorted) as paths;
    URLs with a scheme other than ``file://`` passed through unchanged; order kept. A path
    naming an existing file is taken as it is, even if it holds glob characters."""
    out: list[str] = []
    for pattern in patterns:
        if not _is_local(pattern):
            out.append(pattern)
            continue
        local = _local_path(pattern)
        path = Path(local)
        if not path.is_absolute():
            path = base_dir / path
        if glob.has_magic(local) and not path.is_file():  # an existing file is taken as named
            # Glob relative to base_dir so that magic characters in base_dir itself are literal.
            root = None if Path(local).is_absolute() else base_dir
            matches = sorted(glob.glob(local, root_dir=root))  # noqa: PTH207 (absolute patterns too)
            files = [Path(m) if root is None else root / m for m in matches]
            files = [p for p in files if p.is_file()]
            if not files:
                raise DatasetError(f"{pattern}: no file matches")
            out.extend(str(p) for p in files)
            continue
        if not path.is_file():
            raise DatasetError(f"{pattern}: no such file ({path})")
        out.append(str(path))
    return out


def open_dataset(
    name: str,
    urls: Sequence[str],
    tree: str | Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    skipped: Skipped | None = None,
) -> Dataset:
    """A dataset of ``urls`` (paths or fsspec URLs) and their ``tree`` (one for all, or one
    per file): entries counted with uproot, sizes from fsspec. Opens every file, so bad ones
    are found before anything runs; with ``skipped`` a bad file is left out and recorded
    there instead."""
    if not urls:
        raise DatasetError(f"dataset {name!r}: no files")
    trees = [tree] * len(urls) if isinstance(tree, str) else list(tree)
    entries = []
    for url, t in zip(urls, trees, strict=True):
        try:
            entries.append(_open_file(url, t))
        except DatasetError as exc:
            if skipped is None:
                raise
            skipped.append((url, str(exc)))
    if not entries:
        raise DatasetError(f"dataset {name!r}: none of its files can be read")
    return Dataset(name, tuple(entries), dict(metadata or {}))


def _open_file(url: str, tree: str) -> FileEntry:
    try:
        fs, path = fsspec.core.url_to_fs(url)
        size = int(fs.size(path))
    except FileNotFoundError as exc:
        raise DatasetError(f"{url}: no such file") from exc
    except Exception as exc:  # any fsspec backend's failure: say which file and why
        raise DatasetError(f"{url}: cannot read: {exc}") from exc
    try:
        with open_remote(url) as f:
            if tree not in f:
                trees = sorted({k.split(";")[0] for k, c in f.classnames().items() if c == "TTree"})
                has = f"its trees: {', '.join(trees)}" if trees else "it holds no tree"
                raise DatasetError(f"{url}: no tree {tree!r} ({has})")
            obj = f[tree]
            if not hasattr(obj, "num_entries"):
                raise DatasetError(f"{url}: {tree!r} is a {f.classname_of(tree)}, not a tree")
            n = int(obj.num_entries)
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{url}: not a readable ROOT file: {exc}") from exc
    return FileEntry(url, tree, n, size)


def read_yaml(path: Path, error: type[ValueError], *, missing: str = "no such file") -> Any:
    """The YAML document in ``path``; ``error`` naming the file (and the line) if it cannot
    be read or parsed. Shared by catalogs and jobs files."""
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise error(f"{path}: {missing}") from exc
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise error(f"{path}{yaml_problem(exc)}") from exc


def yaml_problem(exc: Exception) -> str:
    """A YAML parser's error as the end of one line: `` line 4, column 3: not valid YAML:
    expected <block end>, but found '-' (in the block mapping begun at line 2, column 1)``.

    PyYAML's own message spans several lines and quotes the text around the error; users
    get the place (1-based, as editors count) and the problem, and the construct it broke
    when the parser names one."""
    mark = getattr(exc, "problem_mark", None)
    place = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        where = f"line {context_mark.line + 1}, column {context_mark.column + 1}"
        context = re.sub(r"^while parsing (an? )?", "", " ".join(str(context).split()))
        problem += f" (in the {context} begun at {where})"
    return f"{place}: not valid YAML: {problem}"


def load_catalog(path: Path, *, skipped: Skipped | None = None) -> dict[str, Dataset]:
    """The datasets of a YAML (or JSON) catalog, by name::

        datasets:
          zmumu:
            tree: Events
            files: [data/part-000.root, data/*.root, root://host//f.root]
            metadata: {xsec: 1.2}       # optional, given to processors

    Local paths are relative to the catalog; an entry may also be ``{url:, n_events:,
    n_bytes:}``, whose file is then not opened (with ``url`` alone it is). File order is kept.
    ``files`` may also map each path to its tree (``{data/a.root: Events}``), and the whole
    catalog may be a coffea fileset instead (:func:`fileset_datasets`). With ``skipped``,
    files that cannot be read are left out and recorded there (``--skip-bad-files``).
    """
    where = str(path)
    doc = read_yaml(path, CatalogError, missing="no such catalog")
    if not isinstance(doc, Mapping):
        raise CatalogError(f"{where}: expected a mapping with a 'datasets' field")
    if (
        "datasets" not in doc
        and doc
        and all(isinstance(v, Mapping) and "files" in v for v in doc.values())
    ):
        return fileset_datasets(doc, path.parent, where, skipped=skipped)
    datasets = doc.get("datasets")
    if not isinstance(datasets, Mapping) or not datasets:
        raise CatalogError(f"{where}: field 'datasets': missing, empty or not a mapping")
    out: dict[str, Dataset] = {}
    for name, spec in datasets.items():
        out[str(name)] = _catalog_dataset(
            str(name), spec, path.parent, f"{where}: dataset {name!r}", skipped
        )
    return out


def fileset_datasets(
    doc: Any,
    base: Path,
    where: str,
    *,
    tree: str | None = None,
    skipped: Skipped | None = None,
) -> dict[str, Dataset]:
    """The datasets of a coffea fileset, by name: ``{name: {"files": {path: tree},
    "metadata": {...}}}``; ``files`` may also be a list of paths with ``treename`` (or
    ``tree``, the default tree) giving their tree, and a dataset may be just that list.
    Local paths are relative to ``base``. Every file is opened to count its entries (coffea's
    preprocessing does the same)."""
    if not isinstance(doc, Mapping) or not doc:
        raise CatalogError(f"{where}: expected a fileset, {{dataset: {{files: {{path: tree}}}}}}")
    out: dict[str, Dataset] = {}
    for name, spec in doc.items():
        here = f"{where}: dataset {name!r}"
        if isinstance(spec, list | str):
            spec = {"files": spec}
        if not isinstance(spec, Mapping):
            raise CatalogError(f"{here}: expected a mapping with 'files' (and 'metadata')")
        unknown = sorted(str(k) for k in spec if k not in FILESET_DATASET_KEYS)
        if unknown:
            raise CatalogError(
                f"{here}: field {unknown[0]!r}: unknown (expected files, treename, metadata)"
            )
        out[str(name)] = _catalog_dataset(str(name), {"tree": tree, **spec}, base, here, skipped)
    return out


def _catalog_dataset(
    name: str, spec: Any, base: Path, where: str, skipped: Skipped | None = None
) -> Dataset:
    if not isinstance(spec, Mapping):
        raise CatalogError(f"{where}: expected a mapping with 'tree' and 'files'")
    unknown = sorted(str(k) for k in spec if k not in CATALOG_DATASET_KEYS)
    if unknown:
        raise CatalogError(
            f"{where}: field {unknown[0]!r}: unknown (expected tree, files, metadata)"
        )
    tree = spec.get("treename") or spec.get("tree")
    if tree is not None and (not isinstance(tree, str) or not tree):
        raise CatalogError(f"{where}: field 'tree': expected a tree name, got {tree!r}")
    metadata = spec.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise CatalogError(f"{where}: field 'metadata': expected a mapping")
    files = spec.get("files")
    if files is None:
        raise CatalogError(f"{where}: field 'files': missing")
    if isinstance(files, str):
        files = [files]
    items: list[tuple[Any, str | None]]
    if isinstance(files, Mapping):
        items = [(path, t if t is not None else tree) for path, t in files.items()]
    elif isinstance(files, list):
        items = [(item, tree) for item in files]
    else:
        items = []
    if not items:
        raise CatalogError(f"{where}: field 'files': expected a non-empty list or mapping")
    entries: list[FileEntry] = []
    for i, (item, t) in enumerate(items):
        here = f"{where}: field 'files' #{i + 1}"
        if t is None:
            raise CatalogError(
                f"{where}: field 'tree': missing (give 'tree', or files as {{path: tree}})"
            )
        if not isinstance(t, str) or not t:
            raise CatalogError(f"{here}: expected a tree name, got {t!r}")
        entries.extend(_catalog_files(item, t, base, here, skipped))
    if not entries:
        raise CatalogError(f"{where}: none of its files can be read")
    return Dataset(name, tuple(entries), dict(metadata))


def _open_or_skip(url: str, tree: str, where: str, skipped: Skipped | None) -> list[FileEntry]:
    try:
        return [_open_file(url, tree)]
    except DatasetError as exc:
        if skipped is None:
            raise CatalogError(f"{where}: {exc}") from exc
        skipped.append((url, str(exc)))
        return []


def _catalog_files(
    item: Any, tree: str, base: Path, where: str, skipped: Skipped | None = None
) -> list[FileEntry]:
    """The file entries of one item of a catalog's ``files`` list."""
    if isinstance(item, str):
        try:
            urls = expand_files([item], base)
        except DatasetError as exc:
            if skipped is None:
                raise CatalogError(f"{where}: {exc}") from exc
            skipped.append((item, str(exc)))
            return []
        return [e for url in urls for e in _open_or_skip(url, tree, where, skipped)]
    if not isinstance(item, Mapping):
        raise CatalogError(f"{where}: expected a path, a URL or {{url:, n_events:, n_bytes:}}")
    unknown = sorted(str(k) for k in item if k not in CATALOG_FILE_KEYS)
    if unknown:
        raise CatalogError(
            f"{where}: field {unknown[0]!r}: unknown (expected url, n_events, n_bytes)"
        )
    url = item.get("url")
    if not isinstance(url, str) or not url:
        raise CatalogError(f"{where}: field 'url': missing or not a string")
    if _is_local(url) and not Path(_local_path(url)).is_absolute():
        url = str(base / _local_path(url))
    counts = [k for k in ("n_events", "n_bytes") if k in item]
    if not counts:
        return _open_or_skip(url, tree, where, skipped)
    for key in ("n_events", "n_bytes"):
        value = item.get(key)
        if value is None:
            raise CatalogError(f"{where}: field {key!r}: missing (give both counts or neither)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CatalogError(f"{where}: field {key!r}: expected an int >= 0, got {value!r}")
    return [FileEntry(url, tree, int(item["n_events"]), int(item["n_bytes"]))]


def read_events(
    url: str, tree: str, start: int, stop: int, columns: Sequence[str] | None = None
) -> ak.Array:
    """Entries ``[start, stop)`` of one file as an awkward array: ROOT via uproot, or Parquet
    (``.parquet``, where ``tree`` is unused). Raises :class:`DatasetError` rather than return
    fewer entries than asked for, so that no event is silently lost."""
    if not 0 <= start <= stop:
        raise ValueError(f"{url}: entry range [{start}, {stop}) is not a range")
    cols = list(columns) if columns is not None else None
    if url.endswith(".parquet"):
        arr = ak.from_parquet(url, columns=cols)
        n = len(arr)
        if stop > n:
            raise DatasetError(f"{url}: entries [{start}, {stop}) outside the file's {n}")
        return arr[start:stop]
    with open_remote(url) as f:
        try:
            t = f[tree]
        except KeyError as exc:
            raise DatasetError(f"{url}: no tree {tree!r}") from exc
        n = int(t.num_entries)
        if stop > n:
            raise DatasetError(f"{url}: entries [{start}, {stop}) outside the file's {n}")
        return t.arrays(cols, entry_start=start, entry_stop=stop, library="ak")
