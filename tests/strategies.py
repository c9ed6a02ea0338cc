"""Hypothesis strategies, all in one module: event sets over a small data space, small
simulated scenarios (jobs over it), and batches of romosan's file-to-server network."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.policies.cosched.mincostflow import Batch

__all__ = [
    "dense_event_sets",
    "event_sets",
    "flow_batches",
    "grouped_flow_batches",
    "interval_sets",
    "job_lists",
    "multi_file_jobs",
    "placements",
    "raw_ranges",
]


def raw_ranges(
    max_event: int = 200, max_ranges: int = 8
) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Unnormalised ``(start, stop)`` pairs within ``[0, max_event]``: unsorted, possibly
    overlapping, adjacent or empty, as a caller might pass them to ``IntervalSet(...)``."""
    pair = st.tuples(st.integers(0, max_event), st.integers(0, max_event)).map(
        lambda p: (min(p), max(p))
    )
    return st.lists(pair, max_size=max_ranges)


@st.composite
def interval_sets(draw: st.DrawFn, max_event: int = 200, max_ranges: int = 8) -> IntervalSet:
    """An ``IntervalSet`` of events in ``[0, max_event)``.

    Mixes sets built from arbitrary ranges, sets of scattered events (dozens of ranges), and
    the single-range and empty sets that the simulator's hot path mostly sees.
    """
    kind = draw(st.sampled_from(["ranges", "single", "empty", "events"]))
    if kind == "empty":
        return IntervalSet.empty()
    if kind == "single":
        start = draw(st.integers(0, max_event - 1))
        stop = draw(st.integers(start + 1, max_event))
        return IntervalSet.range(start, stop)
    if kind == "events":
        # Scattered single events give many short ranges, so that both operands of a binary
        # operation can be long enough for the linear-merge code paths.
        return IntervalSet.from_events(draw(event_sets(max_event)))
    return IntervalSet(draw(raw_ranges(max_event, max_ranges)))


def event_sets(max_event: int = 200) -> st.SearchStrategy[set[int]]:
    """Sets of individual events in ``[0, max_event)``: the reference model for IntervalSet.

    Half are sparse (a few scattered events), half dense (each event in or out by a coin flip,
    which gives dozens of ranges of a few events each, with gaps of a few events).
    """
    sparse = st.sets(st.integers(0, max_event - 1), max_size=max_event)
    return st.one_of(sparse, dense_event_sets(max_event, min_span=0))


def dense_event_sets(max_event: int = 200, min_span: int = 100) -> st.SearchStrategy[set[int]]:
    """Events of ``[0, n)``, ``min_span <= n <= max_event``, each in or out by a coin flip:
    with the default span, about 25 or more ranges of a few events each."""
    return st.lists(st.booleans(), min_size=min_span, max_size=max_event).map(
        lambda mask: {e for e, inside in enumerate(mask) if inside}
    )


@st.composite
def job_lists(draw: st.DrawFn, max_jobs: int = 8, space: int = 400) -> list[Job]:
    """A few jobs with random arrival gaps and overlapping contiguous segments."""
    n = draw(st.integers(1, max_jobs))
    jobs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 1.0, 7.5, 40.0, 300.0]))
        start = draw(st.integers(0, space - 1))
        size = draw(st.integers(1, space - start))
        jobs.append(Job(job_id=i, submit_s=t, data=IntervalSet.range(start, start + size)))
    return jobs


@st.composite
def placements(draw: st.DrawFn, n_nodes: int, max_files: int = 12) -> list[int]:
    """The node holding each of a few files: spread evenly, or piled on a few nodes."""
    n = draw(st.integers(1, max_files))
    favourites = draw(st.lists(st.integers(0, n_nodes - 1), min_size=1, max_size=n_nodes))
    return [draw(st.sampled_from(favourites)) for _ in range(n)]


@st.composite
def flow_batches(
    draw: st.DrawFn, max_files: int = 4, max_servers: int = 3, max_units: int = 4
) -> Batch:
    """A batch of romosan's network: popularities and free slots (zeros included: unpopular
    files and full servers), the servers where each file costs nothing, whether some server
    holds it (a holder may have no free slot, and a file may be on its way to a server that
    nobody holds it on yet), and the costs l and r (l may be 0, or above r)."""
    n_f = draw(st.integers(1, max_files))
    n_s = draw(st.integers(1, max_servers))
    pop = draw(st.lists(st.integers(0, max_units), min_size=n_f, max_size=n_f))
    free = draw(st.lists(st.integers(0, max_units), min_size=n_s, max_size=n_s))
    ptr = [0]
    idx: list[int] = []
    has_copy = []
    for _ in range(n_f):
        zero = draw(st.sets(st.integers(0, n_s - 1), max_size=n_s))
        idx += sorted(zero)
        ptr.append(len(idx))
        has_copy.append(bool(zero) or draw(st.booleans()))
    local = draw(st.sampled_from([0.0, 1.0, 2.5, 7.0]))
    remote = draw(st.sampled_from([1.0, 3.0, 10.0]))
    return Batch(
        popularity=np.array(pop, dtype=np.int64),
        free=np.array(free, dtype=np.int64),
        zero_ptr=np.array(ptr, dtype=np.int64),
        zero_idx=np.array(idx, dtype=np.int64),
        has_copy=np.array(has_copy, dtype=np.bool_),
        local_cost=local,
        remote_cost=remote,
    )


@st.composite
def grouped_flow_batches(
    draw: st.DrawFn, max_files: int = 4, max_servers: int = 3, max_units: int = 4
) -> Batch:
    """A batch of :func:`flow_batches` whose servers holding none of its files may each
    stand for a group of one to four servers of the same free slots (``Batch.count``)."""
    batch = draw(flow_batches(max_files, max_servers, max_units))
    holding = set(batch.zero_idx.tolist())
    count = [1 if s in holding else draw(st.integers(1, 4)) for s in range(batch.n_servers)]
    return replace(batch, count=np.array(count, dtype=np.int64))


@st.composite
def multi_file_jobs(
    draw: st.DrawFn, n_files: int, file_events: int, max_jobs: int = 12, max_files: int = 3
) -> list[Job]:
    """Jobs each needing one to ``max_files`` whole files of a space of ``n_files`` files of
    ``file_events`` events, arriving together or a little apart."""
    n = draw(st.integers(1, max_jobs))
    jobs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 600.0]))
        files = draw(st.sets(st.integers(0, n_files - 1), min_size=1, max_size=max_files))
        data = IntervalSet((f * file_events, (f + 1) * file_events) for f in files)
        jobs.append(Job(job_id=i, submit_s=t, data=data, files_local=True))
    return jobs
