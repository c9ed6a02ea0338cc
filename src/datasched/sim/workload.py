"""Workloads: the synthetic job stream of ponce-hersch §2.4, and traces saved as CSV.

A job is a contiguous segment of the data space ``[start_event, start_event + n_events)``
submitted at ``submit_s``. The generator draws job sizes from an Erlang distribution, start
points from a distribution that is uniform except for hot regions (10 % of the space holding
50 % of the start points), and arrivals from a Poisson process. Each of the three has its own
random stream, so runs at different loads see the same sizes and start points (common random
numbers): only the arrival times scale with the load.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from datasched._files import atomic_write_text

__all__ = [
    "JobRecord",
    "TraceError",
    "WorkloadError",
    "WorkloadSpec",
    "data_utilisation",
    "expected_single_node_time_s",
    "generate",
    "hot_regions",
    "load_trace",
    "save_trace",
    "theoretical_max_load_jobs_per_h",
]

TRACE_COLUMNS = ("job_id", "submit_s", "start_event", "n_events", "user")


class WorkloadError(ValueError):
    """A workload parameter is out of range; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class TraceError(ValueError):
    """A trace file is malformed at ``line`` (1-based, the header is line 1)."""

    def __init__(self, path: str | os.PathLike[str], line: int, field: str, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = f"{Path(path).name} line {line}" if line else Path(path).name
        field_part = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {field_part}{reason}")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job of a trace: events ``[start_event, start_event + n_events)`` at ``submit_s``."""

    job_id: int
    submit_s: float
    start_event: int
    n_events: int
    user: str = "user"

    @property
    def stop_event(self) -> int:
        return self.start_event + self.n_events


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of the synthetic workload; the defaults are ponce-hersch §2.4's."""

    data_space_bytes: float = 2e12
    bytes_per_event: float = 600e3
    mean_job_events: float = 40_000
    erlang_shape: int = 4
    hot_regions: int = 2
    hot_fraction_of_space: float = 0.10
    hot_fraction_of_starts: float = 0.50
    load_jobs_per_h: float = 1.0
    n_jobs: int = 1000
    seed: int = 0
    min_job_events: int = 1

    def __post_init__(self) -> None:
        positive = (
            "data_space_bytes",
            "bytes_per_event",
            "mean_job_events",
            "load_jobs_per_h",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise WorkloadError(name, f"must be a positive number, got {value!r}")
        for name in ("erlang_shape", "n_jobs", "min_job_events", "hot_regions"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise WorkloadError(name, f"must be a positive integer, got {value!r}")
        for name in ("hot_fraction_of_space", "hot_fraction_of_starts"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise WorkloadError(name, f"must be strictly between 0 and 1, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise WorkloadError("seed", f"must be a non-negative integer, got {self.seed!r}")
        if self.n_events_space < 1:
            raise WorkloadError("data_space_bytes", "holds less than one event")

    @property
    def n_events_space(self) -> int:
        """Events in the data space (2 TB / 600 KB = 3,333,333 by default)."""
        return int(self.data_space_bytes // self.bytes_per_event)


def hot_regions(spec: WorkloadSpec) -> list[tuple[int, int]]:
    """The hot regions as event ranges: equal, evenly spread, together the hot fraction."""
    n = spec.n_events_space
    size = int(n * spec.hot_fraction_of_space / spec.hot_regions)
    out = []
    for i in range(spec.hot_regions):
        centre = (2 * i + 1) * n // (2 * spec.hot_regions)
        out.append((centre - size // 2, centre - size // 2 + size))
    return out


def generate(spec: WorkloadSpec) -> list[JobRecord]:
    """A seeded job stream for ``spec`` (vectorised: 100,000 jobs take a fraction of a second).

    Start points: with probability ``hot_fraction_of_starts`` uniform over the hot regions,
    otherwise uniform over the rest of the space. A segment that would run past the end of the
    space is shifted back to end there (sizes stay Erlang).
    """
    arrivals_rng, sizes_rng, starts_rng = (
        np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(spec.seed).spawn(3)
    )
    n = spec.n_jobs
    space = spec.n_events_space
    gaps = arrivals_rng.exponential(3600.0 / spec.load_jobs_per_h, n)
    submit = np.cumsum(gaps)
    raw = sizes_rng.gamma(spec.erlang_shape, spec.mean_job_events / spec.erlang_shape, n)
    sizes = np.clip(np.rint(raw), spec.min_job_events, space).astype(np.int64)
    starts = _start_points(spec, starts_rng, n)
    starts = np.minimum(starts, space - sizes)
    return [
        JobRecord(job_id=i, submit_s=float(t), start_event=int(a), n_events=int(s))
        for i, (t, a, s) in enumerate(zip(submit, starts, sizes, strict=True))
    ]


def _start_points(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
    """Uniform over the hot regions with the hot probability, else over the cold remainder."""
    space = spec.n_events_space
    regions = hot_regions(spec)
    hot_total = sum(b - a for a, b in regions)
    cold_total = space - hot_total
    hot = rng.random(n) < spec.hot_fraction_of_starts
    u_hot = rng.integers(0, hot_total, n)
    u_cold = rng.integers(0, cold_total, n)
    # Map an offset in the concatenated hot (or cold) ranges to an event number.
    hot_starts = np.array([a for a, _ in regions])
    hot_sizes = np.array([b - a for a, b in regions])
    hot_cum = np.concatenate([[0], np.cumsum(hot_sizes)])
    k = np.searchsorted(hot_cum, u_hot, side="right") - 1
    from_hot = hot_starts[k] + (u_hot - hot_cum[k])
    cold_ranges = []
    prev = 0
    for a, b in regions:
        cold_ranges.append((prev, a))
        prev = b
    cold_ranges.append((prev, space))
    cold_starts = np.array([a for a, _ in cold_ranges])
    cold_cum = np.concatenate([[0], np.cumsum([b - a for a, b in cold_ranges])])
    k = np.searchsorted(cold_cum, u_cold, side="right") - 1
    from_cold = cold_starts[k] + (u_cold - cold_cum[k])
    out: npt.NDArray[np.int64] = np.where(hot, from_hot, from_cold).astype(np.int64)
    return out


def save_trace(records: Sequence[JobRecord], path: str | os.PathLike[str]) -> None:
    """Write a trace CSV atomically: a temporary file beside ``path``, then a rename."""

    def write(fh: IO[str]) -> None:
        writer = csv.writer(fh)
        writer.writerow(TRACE_COLUMNS)
        for r in records:
            writer.writerow([r.job_id, repr(float(r.submit_s)), r.start_event, r.n_events, r.user])

    atomic_write_text(Path(path), write)


def load_trace(
    path: str | os.PathLike[str], *, n_events_space: int | None = None
) -> list[JobRecord]:
    """Read and validate a trace CSV (columns job_id, submit_s, start_event, n_events[, user])."""
    p = Path(path)
    try:
        fh = p.open(newline="")
    except OSError as exc:
        raise TraceError(p, 0, "", f"cannot be read: {exc.strerror or exc}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise TraceError(p, 1, "", "the file is empty; expected a header row")
        header = [h.strip() for h in header]
        required = TRACE_COLUMNS[:4]
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(p, 1, missing[0], "column missing from the header")
        extra = [c for c in header if c not in TRACE_COLUMNS]
        if extra:
            raise TraceError(p, 1, extra[0], "unknown column")
        col = {name: header.index(name) for name in header}
        records: list[JobRecord] = []
        seen: set[int] = set()
        last_submit = -math.inf
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(p, line, "", f"expected {len(header)} values, got {len(row)}")
            job_id = _int(p, line, "job_id", row[col["job_id"]], minimum=0)
            submit = _float(p, line, "submit_s", row[col["submit_s"]])
            start = _int(p, line, "start_event", row[col["start_event"]], minimum=0)
            n_events = _int(p, line, "n_events", row[col["n_events"]], minimum=1)
            user = row[col["user"]].strip() if "user" in col else "user"
            if job_id in seen:
                raise TraceError(p, line, "job_id", f"duplicate job id {job_id}")
            if submit < last_submit:
                raise TraceError(p, line, "submit_s", "submit times must not decrease")
            if n_events_space is not None and start + n_events > n_events_space:
                raise TraceError(
                    p, line, "n_events", f"segment ends past the data space ({n_events_space})"
                )
            seen.add(job_id)
            last_submit = submit
            records.append(JobRecord(job_id, submit, start, n_events, user or "user"))
    if not records:
        raise TraceError(p, 0, "", "holds no jobs")
    return records


def _int(path: Path, line: int, field: str, text: str, *, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        kind = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise TraceError(path, line, field, f"must be {kind}, got {text!r}")
    return value


def _float(path: Path, line: int, field: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise TraceError(path, line, field, f"must be a non-negative number, got {text!r}")
    return value


def expected_single_node_time_s(
    mean_job_events: float = 40_000,
    cpu_s_per_event: float = 0.2,
    bytes_per_event: float = 600e3,
    tertiary_bytes_per_s: float = 1e6,
) -> float:
    """Mean time of a lone job on one node without cache (32,000 s, ponce-hersch §3.4)."""
    return mean_job_events * (cpu_s_per_event + bytes_per_event / tertiary_bytes_per_s)


def theoretical_max_load_jobs_per_h(
    n_nodes: int = 10,
    mean_job_events: float = 40_000,
    cpu_s_per_event: float = 0.2,
    bytes_per_event: float = 600e3,
    disk_bytes_per_s: float = 10e6,
) -> float:
    """Jobs/h with every node busy and every event read from disk (3.46, ponce-hersch §3.4)."""
    per_event = cpu_s_per_event + bytes_per_event / disk_bytes_per_s
    return 3600.0 * n_nodes / (mean_job_events * per_event)


def data_utilisation(
    records: Sequence[JobRecord], n_events_space: int, bins: int = 200
) -> npt.NDArray[np.int64]:
    """How many jobs touch each of ``bins`` equal slices of the space (ponce-hersch Figure 2)."""
    edges = np.linspace(0, n_events_space, bins + 1)
    starts = np.array([r.start_event for r in records])
    stops = np.array([r.stop_event for r in records])
    first = np.searchsorted(edges, starts, side="right") - 1
    last = np.searchsorted(edges, stops - 1, side="right") - 1
    diff = np.zeros(bins + 1, dtype=np.int64)
    np.add.at(diff, np.clip(first, 0, bins - 1), 1)
    np.add.at(diff, np.clip(last, 0, bins - 1) + 1, -1)
    return np.cumsum(diff[:bins])
