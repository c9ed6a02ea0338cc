"""The runtime's files in the core's data space (:class:`~datasched.core.data.DataSpace`).

The core speaks in event numbers (docs/design.md, "The data model"); the runtime speaks in files. A
job's dataset is placed in the data space (files already there, named by another dataset,
list or glob, keep their events, so the cache directory sees the overlap) and its event range
becomes the union of the matching file ranges: an :class:`IntervalSet`.
"""

from __future__ import annotations

from datasched.core.data import DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.runtime.dataset import Dataset

__all__ = ["job_events", "place"]


def place(space: DataSpace, dataset: Dataset) -> list[int]:
    """Add ``dataset``'s files to ``space``; returns their indices there, in its order."""
    specs = [FileSpec(f.url, f.n_events, f.n_bytes, tree=f.tree) for f in dataset.files]
    return list(space.add_dataset(dataset.name, specs).files)


def job_events(space: DataSpace, dataset: Dataset, start: int, stop: int) -> IntervalSet:
    """The global events of ``dataset``'s own events ``[start, stop)``."""
    ids = place(space, dataset)
    ranges = []
    for file_index, a, b in dataset.locate(start, stop):
        base = space.files[ids[file_index]].start
        ranges.append((base + a, base + b))
    return IntervalSet(ranges)
