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
    "TRACE_COLUMNS",
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
"""Columns of a trace CSV, in the order :func:`save_trace` writes them; ``user`` is optional."""


class WorkloadError(ValueError):
    """A parameter of a :class:`WorkloadSpec` (ponce-hersch §2.4) is out of range.

    ``field`` names the parameter and ``reason`` says what is wrong, so that a front end can
    name its own option for the field; the message is ``"<field>: <reason>"``.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class TraceError(ValueError):
    """A trace of ponce-hersch §2.4 jobs is malformed, on reading or on writing.

    ``line`` is the 1-based line of the file (the header is line 1; 0 means the whole file),
    ``field`` the column at fault ("" when none is), ``reason`` what is wrong. The message
    reads ``"trace.csv line 7: field 'n_events': must be a positive integer, got '-3'"``.
    """

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
    """One job of a trace (ponce-hersch §2.4): a contiguous segment of the data space.

    The job reads events ``[start_event, start_event + n_events)`` and is submitted
    ``submit_s`` seconds after the start of the run. Records are not validated here (the
    engines build them from checked input); :func:`save_trace` and :func:`load_trace` check them.
    """

    job_id: int
    submit_s: float
    start_event: int
    n_events: int
    user: str = "user"

    @property
    def stop_event(self) -> int:
        """One past the last event the job reads (the segment is half-open)."""
        return self.start_event + self.n_events


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of the synthetic workload; every default is ponce-hersch §2.4's.

    2 TB of 600 KB events; Erlang(4) job sizes of mean 40,000 events; two hot regions holding
    10 % of the space and 50 % of the start points; Poisson arrivals at ``load_jobs_per_h``.
    ``n_jobs`` and ``seed`` choose the sample; ``min_job_events`` is a floor on rounded sizes.
    Invalid values raise :class:`WorkloadError` naming the field.
    """

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
        for name in ("data_space_bytes", "bytes_per_event", "mean_job_events", "load_jobs_per_h"):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and value > 0):
                raise WorkloadError(name, f"must be a positive number, got {value!r}")
        for name in ("erlang_shape", "n_jobs", "min_job_events", "hot_regions"):
            value = getattr(self, name)
            if not (_is_int(value) and value >= 1):
                raise WorkloadError(name, f"must be a positive integer, got {value!r}")
        for name in ("hot_fraction_of_space", "hot_fraction_of_starts"):
            value = getattr(self, name)
            if not (_is_number(value) and 0 < value < 1):
                raise WorkloadError(name, f"must be strictly between 0 and 1, got {value!r}")
        if not (_is_int(self.seed) and self.seed >= 0):
            raise WorkloadError("seed", f"must be a non-negative integer, got {self.seed!r}")
        space = self.n_events_space
        if space < 1:
            raise WorkloadError("data_space_bytes", "holds less than one event")
        if self.min_job_events > space:
            raise WorkloadError(
                "min_job_events", f"must not exceed the {space} events of the data space"
            )
        # Each hot region must hold an event; the cold remainder then always does, as the
        # hot fraction is below 1.
        if _hot_region_events(space, self.hot_fraction_of_space, self.hot_regions) < 1:
            raise WorkloadError(
                "hot_regions", f"too many for the space: {self.hot_regions} regions of no event"
            )

    @property
    def n_events_space(self) -> int:
        """Events in the data space (2 TB / 600 KB = 3,333,333 by default, ponce-hersch §2.4)."""
        return int(self.data_space_bytes // self.bytes_per_event)


def _is_int(value: object) -> bool:
    """An integer, numpy's included; not a bool, which is almost always a slip."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A real number, numpy's included; not a bool."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _hot_region_events(space: int, fraction: float, regions: int) -> int:
    return int(space * fraction / regions)


def hot_regions(spec: WorkloadSpec) -> list[tuple[int, int]]:
    """The hot regions of ponce-hersch §2.4 as half-open event ranges ``(first, stop)``.

    The paper gives their number and total size, not where they lie: here they are equal, and
    region ``i`` of ``k`` is centred at ``(2i + 1) / 2k`` of the space, so they are evenly spread
    and never touch each other or the ends of the space.
    """
    n = spec.n_events_space
    size = _hot_region_events(n, spec.hot_fraction_of_space, spec.hot_regions)
    out = []
    for i in range(spec.hot_regions):
        first = (2 * i + 1) * n // (2 * spec.hot_regions) - size // 2
        out.append((first, first + size))
    return out


def generate(spec: WorkloadSpec) -> list[JobRecord]:
    """A seeded job stream for ``spec``: the synthetic workload of ponce-hersch §2.4.

    * Arrivals: a Poisson process, exponential gaps of mean ``3600 / load_jobs_per_h`` seconds;
      the first job arrives one gap after time 0.
    * Sizes: Erlang(``erlang_shape``) of mean ``mean_job_events``, rounded to whole events and
      kept within ``[min_job_events, n_events_space]``.
    * Start points: with probability ``hot_fraction_of_starts`` uniform over the union of the
      hot regions, otherwise uniform over the rest of the space (the cold remainder), so the
      hot regions hold exactly that share of start points. A segment that would run past the
      end of the space is shifted back to end there rather than clipped, so sizes stay Erlang.

    The three quantities come from independent child streams of ``SeedSequence(seed)``: a
    change of load moves the arrival times (scaled by the load ratio) but leaves the sizes and
    start points as they were, giving common random numbers across loads and policies.
    Vectorised: 100,000 jobs take a fraction of a second.
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
    starts = np.minimum(_start_points(spec, starts_rng, n), space - sizes)
    return [
        JobRecord(job_id=i, submit_s=t, start_event=a, n_events=s)
        for i, (t, a, s) in enumerate(
            zip(submit.tolist(), starts.tolist(), sizes.tolist(), strict=True)
        )
    ]


def _start_points(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
    """Uniform over the hot regions with the hot probability, else over the cold remainder."""
    space = spec.n_events_space
    hot_ranges = hot_regions(spec)
    bounds = [0, *(x for r in hot_ranges for x in r), space]
    cold_ranges = list(zip(bounds[::2], bounds[1::2], strict=True))
    hot = rng.random(n) < spec.hot_fraction_of_starts
    from_hot = _uniform_over(rng, hot_ranges, n)
    from_cold = _uniform_over(rng, cold_ranges, n)
    out: npt.NDArray[np.int64] = np.where(hot, from_hot, from_cold).astype(np.int64)
    return out


def _uniform_over(
    rng: np.random.Generator, ranges: Sequence[tuple[int, int]], n: int
) -> npt.NDArray[np.int64]:
    """``n`` events uniform over the union of disjoint half-open ``ranges``."""
    firsts = np.array([a for a, _ in ranges], dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum([b - a for a, b in ranges])]).astype(np.int64)
    # An offset into the ranges laid end to end, mapped back to the range holding it.
    offset = rng.integers(0, cum[-1], n)
    k = np.searchsorted(cum, offset, side="right") - 1
    out: npt.NDArray[np.int64] = firsts[k] + (offset - cum[k])
    return out


def save_trace(records: Sequence[JobRecord], path: str | os.PathLike[str]) -> None:
    """Write ``records`` as a trace CSV that :func:`load_trace` reads back equal.

    Records are checked as they are written, by the rules :func:`load_trace` applies; a bad
    one raises :class:`TraceError` naming the line it would have had. The file is written to a
    temporary file beside ``path`` and renamed into place only when complete, so a failure
    leaves ``path`` as it was (absent, or the previous trace) and no partial file behind.
    """
    p = Path(path)
    if not records:
        # load_trace refuses a trace with no job, so refuse to write one.
        raise TraceError(p, 0, "", "holds no jobs")

    def write(fh: IO[str]) -> None:
        writer = csv.writer(fh)
        writer.writerow(TRACE_COLUMNS)
        seen: set[int] = set()
        last_submit = -math.inf
        for line, r in enumerate(records, start=2):
            _check_record(p, line, r)
            _check_order(p, line, r.job_id, r.submit_s, seen, last_submit)
            seen.add(r.job_id)
            last_submit = r.submit_s
            writer.writerow([r.job_id, repr(float(r.submit_s)), r.start_event, r.n_events, r.user])

    atomic_write_text(p, write)


def load_trace(
    path: str | os.PathLike[str], *, n_events_space: int | None = None
) -> list[JobRecord]:
    """Read and check a trace CSV of ponce-hersch §2.4 jobs.

    The header must name ``job_id, submit_s, start_event, n_events`` and may add ``user``
    (default "user"), in any order, nothing else. Each row must hold a non-negative integer
    ``job_id`` seen on no earlier row, a finite non-negative ``submit_s`` no smaller than the
    row before's, a non-negative integer ``start_event`` and a positive integer ``n_events``;
    with ``n_events_space`` given, the segment must also end within the data space. Blank
    lines are skipped. The first problem raises :class:`TraceError` with its file line and
    field; a file with no job is an error too.
    """
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
        missing = [c for c in TRACE_COLUMNS[:4] if c not in header]
        if missing:
            raise TraceError(p, 1, missing[0], "column missing from the header")
        extra = [c for c in header if c not in TRACE_COLUMNS]
        if extra:
            raise TraceError(p, 1, extra[0], "unknown column")
        repeated = [c for i, c in enumerate(header) if c in header[:i]]
        if repeated:
            raise TraceError(p, 1, repeated[0], "column named twice in the header")
        col = {name: i for i, name in enumerate(header)}
        records: list[JobRecord] = []
        seen: set[int] = set()
        last_submit = -math.inf
        end = reader.line_num
        for row in reader:
            # A row's first line, from the reader's count: right when a quoted value spans lines.
            line, end = end + 1, reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(p, line, "", f"expected {len(header)} values, got {len(row)}")
            job_id = _int(p, line, "job_id", row[col["job_id"]], minimum=0)
            submit = _float(p, line, "submit_s", row[col["submit_s"]])
            start = _int(p, line, "start_event", row[col["start_event"]], minimum=0)
            n_events = _int(p, line, "n_events", row[col["n_events"]], minimum=1)
            user = row[col["user"]].strip() if "user" in col else ""
            _check_order(p, line, job_id, submit, seen, last_submit)
            if n_events_space is not None and start + n_events > n_events_space:
                raise TraceError(
                    p,
                    line,
                    "n_events",
                    f"segment [{start}, {start + n_events}) ends past the data space "
                    f"({n_events_space} events)",
                )
            seen.add(job_id)
            last_submit = submit
            records.append(JobRecord(job_id, submit, start, n_events, user or "user"))
    if not records:
        raise TraceError(p, 0, "", "holds no jobs")
    return records


def _check_record(path: Path, line: int, r: JobRecord) -> None:
    """The rules within one row, applied to a record about to be saved."""
    if not (_is_int(r.job_id) and r.job_id >= 0):
        raise TraceError(path, line, "job_id", f"must be a non-negative integer, got {r.job_id!r}")
    if not (_is_number(r.submit_s) and math.isfinite(r.submit_s) and r.submit_s >= 0):
        reason = f"must be a non-negative number, got {r.submit_s!r}"
        raise TraceError(path, line, "submit_s", reason)
    if not (_is_int(r.start_event) and r.start_event >= 0):
        reason = f"must be a non-negative integer, got {r.start_event!r}"
        raise TraceError(path, line, "start_event", reason)
    if not (_is_int(r.n_events) and r.n_events >= 1):
        raise TraceError(path, line, "n_events", f"must be a positive integer, got {r.n_events!r}")
    # One printable line, not blank: the loader maps an empty cell to "user" and counts lines.
    if not (isinstance(r.user, str) and r.user.strip() == r.user != "" and r.user.isprintable()):
        reason = f"must be a non-empty printable name without surrounding spaces, got {r.user!r}"
        raise TraceError(path, line, "user", reason)


def _check_order(
    path: Path, line: int, job_id: int, submit_s: float, seen: set[int], last_submit: float
) -> None:
    """The rules across rows: job ids unique, submit times non-decreasing."""
    if job_id in seen:
        raise TraceError(path, line, "job_id", f"duplicate job id {job_id}")
    if submit_s < last_submit:
        raise TraceError(
            path,
            line,
            "submit_s",
            f"submit times must not decrease, got {submit_s!r} after {last_submit!r}",
        )


def _int(path: Path, line: int, field: str, text: str, *, minimum: int) -> int:
    try:
        value: int | None = int(text.strip())
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
    """Mean time of a lone job on one node reading everything from tertiary storage.

    ``mean_job_events * (cpu + bytes / tertiary throughput)``: 40,000 × (0.2 + 0.6) = 32,000 s
    with the figures of ponce-hersch §2.4 (the reference time of §3.4).
    """
    return mean_job_events * (cpu_s_per_event + bytes_per_event / tertiary_bytes_per_s)


def theoretical_max_load_jobs_per_h(
    n_nodes: int = 10,
    mean_job_events: float = 40_000,
    cpu_s_per_event: float = 0.2,
    bytes_per_event: float = 600e3,
    disk_bytes_per_s: float = 10e6,
) -> float:
    """The load no policy can exceed: every node always busy, every event read from disk.

    ``3600 * n_nodes / (mean_job_events * (cpu + bytes / disk throughput))``: 3.46 jobs/h
    for 10 nodes with the figures of ponce-hersch §2.4 (the bound quoted in §3.4).
    """
    per_event = cpu_s_per_event + bytes_per_event / disk_bytes_per_s
    return 3600.0 * n_nodes / (mean_job_events * per_event)


def data_utilisation(
    records: Sequence[JobRecord], n_events_space: int, bins: int = 200
) -> npt.NDArray[np.int64]:
    """How many jobs touch each of ``bins`` equal slices of the space (ponce-hersch Figure 2).

    Slice ``k`` holds events ``[k * n / bins, (k + 1) * n / bins)``; a job touches every slice
    from the one holding its first event to the one holding its last. Counted with a
    difference array and a cumulative sum; segments reaching past the space count in the
    last slice.
    """
    if not (_is_int(n_events_space) and n_events_space >= 1):
        raise ValueError(f"n_events_space: must be a positive integer, got {n_events_space!r}")
    if not (_is_int(bins) and bins >= 1):
        raise ValueError(f"bins: must be a positive integer, got {bins!r}")
    starts = np.fromiter((r.start_event for r in records), dtype=np.int64)
    stops = np.fromiter((r.stop_event for r in records), dtype=np.int64)
    # Integer slice index of an event: floor(event * bins / n), exact, with no float edges.
    first = np.clip(starts * bins // n_events_space, 0, bins - 1)
    last = np.clip((stops - 1) * bins // n_events_space, 0, bins - 1)
    diff = np.bincount(first, minlength=bins + 1) - np.bincount(last + 1, minlength=bins + 1)
    out: npt.NDArray[np.int64] = np.cumsum(diff[:bins]).astype(np.int64)
    return out
