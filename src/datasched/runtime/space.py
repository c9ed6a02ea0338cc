"""The runtime's event space: every file of every job's dataset, numbered once.

The core speaks in event numbers (DESIGN.md, "Data model"); the runtime speaks in files. Files
are laid end to end in the order first met, so two jobs naming the same file (through different
datasets, lists or globs) name the same events, and the core's cache directory sees the overlap.
A job's data is then a union of file ranges: an :class:`IntervalSet`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from datasched.core.intervals import IntervalSet
from datasched.runtime.dataset import Dataset

__all__ = ["EventSpace", "SpaceFile"]


@dataclass(frozen=True, slots=True)
class SpaceFile:
    """One file in the event space: global events ``[start, start + n_events)``."""

    url: str
    tree: str
    n_events: int
    n_bytes: int
    start: int

    @property
    def stop(self) -> int:
        return self.start + self.n_events


class EventSpace:
    """Files laid end to end; maps global event ranges to (file, local range) and back."""

    def __init__(self) -> None:
        self.files: list[SpaceFile] = []
        self._index: dict[tuple[str, str], int] = {}
        self._starts: list[int] = []
        self.n_events = 0

    def add(self, dataset: Dataset) -> list[int]:
        """Place ``dataset``'s files (known ones keep their place); returns their indices."""
        out = []
        for f in dataset.files:
            key = (f.url, f.tree)
            i = self._index.get(key)
            if i is None:
                i = len(self.files)
                self.files.append(SpaceFile(f.url, f.tree, f.n_events, f.n_bytes, self.n_events))
                self._starts.append(self.n_events)
                self._index[key] = i
                self.n_events += f.n_events
            out.append(i)
        return out

    def job_data(self, dataset: Dataset, start: int, stop: int) -> IntervalSet:
        """The global events of ``dataset``'s local events ``[start, stop)``."""
        ids = self.add(dataset)
        ranges = []
        for file_index, a, b in dataset.locate(start, stop):
            base = self.files[ids[file_index]].start
            ranges.append((base + a, base + b))
        return IntervalSet(ranges)

    def file_at(self, event: int) -> int:
        """Index of the file holding global ``event``."""
        if not 0 <= event < self.n_events:
            raise IndexError(f"event {event} outside the event space [0, {self.n_events})")
        return bisect_right(self._starts, event) - 1

    def file_of(self, url: str, tree: str | None = None) -> int | None:
        """Index of ``url`` (with any tree when ``tree`` is None), or None."""
        if tree is not None:
            return self._index.get((url, tree))
        for (u, _), i in self._index.items():
            if u == url:
                return i
        return None

    def ranges_of_urls(self, urls: list[str]) -> IntervalSet:
        """The events of the named files (files not in the space are skipped)."""
        wanted = set(urls)
        return IntervalSet((f.start, f.stop) for f in self.files if f.url in wanted)

    @property
    def bytes_per_event(self) -> float:
        n = sum(f.n_events for f in self.files)
        return sum(f.n_bytes for f in self.files) / n if n else 0.0
