"""The data model: datasets of files, numbered as one event space (docs/design.md, "The data
model").

Every file is a contiguous range of event numbers, files laid end to end in the order they
were added, so a job's data, a subjob, a packet, a cache's content and a transfer are all
:class:`~datasched.core.intervals.IntervalSet` s. Sizes are per file, in bytes: a file's
events need not be the same size as another file's.

A data space also says how caches hold its data (its :class:`CacheGrain`): any event range
(the model of ponce-hersch, whose events are all the same size) or whole files only (real ROOT
files, the co-scheduling of romosan, STAR's file catalog, the grid's datasets). Engines follow
the data space; a policy never assumes one grain.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasched.core.intervals import IntervalSet

__all__ = ["TERTIARY", "CacheGrain", "DataError", "DataFile", "DataSpace", "Dataset", "FileSpec"]

TERTIARY = "tertiary"
"""Where every file has a replica unless told otherwise: central (tape-backed) storage."""

_EMPTY = IntervalSet()


class DataError(ValueError):
    """A file or dataset description is out of range; ``field`` names the bad field."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class CacheGrain(enum.Enum):
    """What a cache holds of a data space."""

    RANGE = "range"
    """Any event range (ponce-hersch: a subjob caches exactly the events it read)."""
    FILE = "file"
    """Whole files only (a file is fetched, cached, pinned and evicted as one)."""


@dataclass(frozen=True, slots=True)
class FileSpec:
    """A file to add to a data space: its name (a URL for real files), events and bytes."""

    name: str
    n_events: int
    n_bytes: int
    tree: str = ""
    replicas: tuple[str, ...] = (TERTIARY,)
    """Where copies live from the start: tertiary storage, or site names (the grid)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise DataError("name", "a file needs a name")
        if not (isinstance(self.n_events, int) and self.n_events >= 0):
            raise DataError("n_events", f"must be a whole number >= 0, got {self.n_events!r}")
        if not (isinstance(self.n_bytes, int) and self.n_bytes >= 0):
            raise DataError("n_bytes", f"must be a whole number >= 0, got {self.n_bytes!r}")


@dataclass(frozen=True, slots=True)
class DataFile:
    """A file of the data space: global events ``[start, stop)``."""

    index: int
    name: str
    tree: str
    n_events: int
    n_bytes: int
    start: int
    dataset: str
    replicas: tuple[str, ...] = (TERTIARY,)

    @property
    def stop(self) -> int:
        return self.start + self.n_events

    @property
    def events(self) -> IntervalSet:
        return IntervalSet.range(self.start, self.stop)

    @property
    def bytes_per_event(self) -> float:
        return self.n_bytes / self.n_events if self.n_events else 0.0


@dataclass(frozen=True, slots=True)
class Dataset:
    """A named set of files with free metadata (STAR's catalog, coffea's filesets)."""

    name: str
    files: tuple[int, ...]
    """Indices into the data space's files, in the dataset's own order."""
    metadata: Mapping[str, Any] = field(default_factory=dict)


class DataSpace:
    """Files laid end to end in one event numbering, grouped in datasets.

    Append-only: a file keeps its events once added (the runtime adds datasets as jobs name
    them; a file named twice, through two datasets, is the same events). Lookups by event
    cost a bisect over the file starts.
    """

    def __init__(self, grain: CacheGrain = CacheGrain.FILE) -> None:
        self.grain = grain
        self._files: list[DataFile] = []
        self._starts: list[int] = []
        self._by_name: dict[tuple[str, str], int] = {}
        self.datasets: dict[str, Dataset] = {}
        self.n_events = 0
        self._n_bytes = 0
        self.uniform_bytes_per_event: float | None = None
        """The size of every event when all files agree on it, else None (an attribute, not
        a property: the simulator reads it per subjob)."""
        self._uniform = True

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def uniform(
        cls,
        n_events: int,
        bytes_per_event: float,
        *,
        file_events: int = 0,
        name: str = "data",
    ) -> DataSpace:
        """``n_events`` events of ``bytes_per_event`` each (ponce-hersch §2.4's data space).

        ``file_events`` 0 keeps it one range-grained space (any range may be cached); more
        cuts it into files of that many events (the last one shorter), cached whole.
        """
        if not (isinstance(n_events, int) and n_events > 0):
            raise DataError("n_events", f"must be a positive whole number, got {n_events!r}")
        if not bytes_per_event > 0:
            raise DataError("bytes_per_event", f"must be positive, got {bytes_per_event!r}")
        if file_events < 0:
            raise DataError("file_events", f"must not be negative, got {file_events!r}")
        grain = CacheGrain.FILE if file_events else CacheGrain.RANGE
        space = cls(grain)
        size = file_events or n_events
        specs = []
        for i, start in enumerate(range(0, n_events, size)):
            n = min(size, n_events - start)
            specs.append(FileSpec(f"{name}/{i:06d}", n, round(n * bytes_per_event)))
        space.add_dataset(name, specs)
        space.uniform_bytes_per_event = bytes_per_event  # exact, not the rounded file ratio
        return space

    def add_dataset(
        self,
        name: str,
        files: Iterable[FileSpec],
        metadata: Mapping[str, Any] | None = None,
    ) -> Dataset:
        """Add a dataset of ``files`` (files already known by name and tree keep their
        events); a second dataset of the same name replaces the first's file list."""
        if not name:
            raise DataError("dataset", "a dataset needs a name")
        indices = tuple(self.add_file(f, dataset=name) for f in files)
        ds = Dataset(name, indices, dict(metadata or {}))
        self.datasets[name] = ds
        return ds

    def add_file(self, spec: FileSpec, *, dataset: str = "") -> int:
        """Place a file (a known one keeps its place); returns its index."""
        key = (spec.name, spec.tree)
        known = self._by_name.get(key)
        if known is not None:
            return known
        index = len(self._files)
        f = DataFile(
            index,
            spec.name,
            spec.tree,
            spec.n_events,
            spec.n_bytes,
            self.n_events,
            dataset,
            spec.replicas,
        )
        self._files.append(f)
        self._starts.append(f.start)
        self._by_name[key] = index
        self.n_events += f.n_events
        self._n_bytes += f.n_bytes
        if f.n_events:
            density = f.bytes_per_event
            current = self.uniform_bytes_per_event
            if current is None and self._uniform:
                self.uniform_bytes_per_event = density
            elif current is not None and abs(density - current) > 1e-9 * density:
                self.uniform_bytes_per_event = None
                self._uniform = False
        return index

    # -- reading ----------------------------------------------------------------------------

    @property
    def files(self) -> Sequence[DataFile]:
        return self._files

    @property
    def n_bytes(self) -> int:
        return self._n_bytes

    @property
    def bytes_per_event(self) -> float:
        """The mean size of an event (the exact size of every event when uniform)."""
        if self.uniform_bytes_per_event is not None:
            return self.uniform_bytes_per_event
        return self._n_bytes / self.n_events if self.n_events else 0.0

    @property
    def boundaries(self) -> list[int]:
        """Event numbers where cutting is cheap: file starts for whole-file caching (a cut
        inside a file makes two nodes fetch the same file), none for range caching."""
        if self.grain is CacheGrain.RANGE:
            return []
        return self._starts

    def file_at(self, event: int) -> int:
        """Index of the file holding ``event``."""
        if not 0 <= event < self.n_events:
            raise IndexError(f"event {event} outside the data space [0, {self.n_events})")
        # An empty file shares its start with the next one: bisect_right lands after it.
        return bisect_right(self._starts, event) - 1

    def file_of(self, name: str, tree: str | None = None) -> int | None:
        """Index of the file named ``name`` (in any tree when ``tree`` is None), or None."""
        if tree is not None:
            return self._by_name.get((name, tree))
        for (n, _), i in self._by_name.items():
            if n == name:
                return i
        return None

    def files_in(self, data: IntervalSet) -> list[int]:
        """Indices of the files that ``data`` touches, in event order."""
        out: list[int] = []
        files = self._files
        for a, b in data:
            i = self.file_at(a)
            while i < len(files) and files[i].start < b:
                if files[i].n_events and (not out or out[-1] != i):
                    out.append(i)
                i += 1
        return out

    def whole_files(self, data: IntervalSet) -> IntervalSet:
        """The files that ``data`` touches, whole (what a whole-file cache holds of it)."""
        return IntervalSet.from_sorted(
            (self._files[i].start, self._files[i].stop) for i in self.files_in(data)
        )

    def full_files(self, data: IntervalSet) -> IntervalSet:
        """The files that lie entirely inside ``data``."""
        out = []
        for i in self.files_in(data):
            f = self._files[i]
            if data.clip(f.start, f.stop).length == f.n_events:
                out.append((f.start, f.stop))
        return IntervalSet.from_sorted(out)

    def bytes_of(self, data: IntervalSet) -> float:
        """Bytes of the events ``data`` (each file's share of its own size)."""
        density = self.uniform_bytes_per_event
        if density is not None:
            return data.length * density
        total = 0.0
        for i in self.files_in(data):
            f = self._files[i]
            total += data.clip(f.start, f.stop).length * f.bytes_per_event
        return total

    def cached_bytes(self, data: IntervalSet) -> float:
        """Bytes a cache of this space's grain spends on holding ``data``."""
        if self.grain is CacheGrain.FILE:
            return float(sum(self._files[i].n_bytes for i in self.files_in(data)))
        return self.bytes_of(data)

    def events_of(self, names: Iterable[str]) -> IntervalSet:
        """The events of the named files (names not in the space are skipped)."""
        wanted = set(names)
        return IntervalSet((f.start, f.stop) for f in self._files if f.name in wanted)

    def dataset_events(self, name: str) -> IntervalSet:
        """Every event of a dataset."""
        ds = self.datasets.get(name)
        if ds is None:
            raise DataError("dataset", f"no dataset named {name!r}")
        return IntervalSet((self._files[i].start, self._files[i].stop) for i in ds.files)
