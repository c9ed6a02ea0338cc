"""Monitoring as PROOF keeps it (the benchmark package of ganis et al. §2.2, ROOT's
``TPerfStats``), the same for both engines: a row per packet (worker, node, file, events,
processing and CPU time, bytes, latency, where its data came from), a job's progress over time
(events/s, MB/s, active workers), the fraction of a run with fewer than half the workers
active, and a live view of the same numbers while a run goes on (:class:`LiveMonitor`).

The simulator and the runtime each turn their own packet log into :class:`PacketRow` s
(:mod:`datasched.sim.monitor`, :mod:`datasched.runtime.monitor`), so both write one report
format. Pure bookkeeping and CSV; the figures are :mod:`datasched.monitoring_plots`'.

Categories say where a packet's data lay. The simulator uses the paper's three: *local*,
*other worker* (another node with a worker of the job), *non-worker* (a file server or central
storage). The runtime knows the source, not which peer: *local*, *peer*, *tertiary*.
"""

from __future__ import annotations

import csv
import io
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from datasched._files import atomic_write_text

__all__ = [
    "JobRates",
    "LiveMonitor",
    "PacketRow",
    "Progress",
    "active_workers",
    "progress",
    "tail_fraction",
    "write_packets_csv",
    "write_progress_csv",
]


@dataclass(frozen=True, slots=True)
class PacketRow:
    """One packet as the monitor keeps it, whichever engine ran it."""

    job: str
    worker: str
    """The slot (worker process or thread) that processed it."""
    node: str
    file: str
    events: int
    start_s: float
    """When its processing started, seconds after the run's start."""
    end_s: float
    """When its processing ended (reading and computing done) on its worker."""
    cpu_s: float
    n_bytes: float
    category: str
    read_from: str = ""
    """The node (or storage) its data was read from, where known."""
    latency_s: float = 0.0
    """How long its worker waited for it after its previous packet (0 in the simulator,
    which hands packets out at once)."""

    @property
    def processing_s(self) -> float:
        return self.end_s - self.start_s


def active_workers(rows: Sequence[PacketRow]) -> list[tuple[float, int]]:
    """The number of workers processing at least one packet, as steps ``(time, count from
    then on)``. A runtime worker runs several packets at once (a slot's threads, its
    slots): it counts once, as PROOF's active workers do (Figs. 3-4), so the count is
    measured against the number of workers (half of them: :func:`tail_fraction`)."""
    changes: dict[float, dict[str, int]] = {}
    for p in rows:
        at = changes.setdefault(p.start_s, {})
        at[p.worker] = at.get(p.worker, 0) + 1
        at = changes.setdefault(p.end_s, {})
        at[p.worker] = at.get(p.worker, 0) - 1
    busy: dict[str, int] = {}
    steps: list[tuple[float, int]] = []
    n = 0
    for t in sorted(changes):
        for worker, delta in changes[t].items():
            if not delta:
                continue
            was = busy.get(worker, 0)
            now = was + delta
            busy[worker] = now
            n += (now > 0) - (was > 0)
        steps.append((t, n))
    return steps


def tail_fraction(rows: Sequence[PacketRow], n_workers: int, start_s: float, end_s: float) -> float:
    """The fraction of ``[start_s, end_s]`` during which fewer than half the ``n_workers``
    were processing a packet (the issue's measure of a tail)."""
    if end_s <= start_s:
        return 0.0
    below = 0.0
    at, n = start_s, 0
    for t, count in active_workers(rows):
        t = min(max(t, start_s), end_s)
        if 2 * n < n_workers:
            below += t - at
        at, n = t, count
    if 2 * n < n_workers:
        below += end_s - at
    return below / (end_s - start_s)


@dataclass(frozen=True, slots=True)
class Progress:
    """One interval of a job's progress (PROOF's progress messages, averaged over a bin)."""

    start_s: float
    events_per_s: float
    mb_per_s: float
    active_workers: float


def _spread(rows: Sequence[PacketRow], lo: float, hi: float) -> tuple[float, float, float]:
    """Events, MB and the workers' busy seconds of the packets within ``[lo, hi)``: each
    packet's events and bytes in proportion to its processing time there, and each worker's
    time with at least one packet in process (a worker running packets side by side counts
    its time once, as :func:`active_workers` counts it once)."""
    events = mbytes = 0.0
    spans: dict[str, list[tuple[float, float]]] = {}
    for p in rows:
        a, b = max(p.start_s, lo), min(p.end_s, hi)
        overlap = b - a
        if overlap <= 0 and not (p.start_s == p.end_s and lo <= p.start_s < hi):
            continue
        span = p.end_s - p.start_s
        share = overlap / span if span > 0 else 1.0
        events += p.events * share
        mbytes += p.n_bytes * share / 1e6
        if overlap > 0:
            spans.setdefault(p.worker, []).append((a, b))
    busy = 0.0
    for mine in spans.values():
        mine.sort()
        end = -math.inf
        for a, b in mine:
            busy += max(b - max(a, end), 0.0)
            end = max(end, b)
    return events, mbytes, busy


def progress(rows: Sequence[PacketRow], bin_s: float, end_s: float) -> list[Progress]:
    """Events/s, MB/s and mean active workers per bin of ``bin_s``, each packet's events and
    bytes spread evenly over its processing time."""
    n_bins = max(int(end_s / bin_s + 0.999999), 1)
    by_bin: list[list[PacketRow]] = [[] for _ in range(n_bins)]
    for p in rows:
        first, last = int(p.start_s // bin_s), min(int(p.end_s // bin_s), n_bins - 1)
        for b in range(max(first, 0), last + 1):
            by_bin[b].append(p)
    out = []
    for b in range(n_bins):
        events, mbytes, busy = _spread(by_bin[b], b * bin_s, (b + 1) * bin_s)
        out.append(Progress(b * bin_s, events / bin_s, mbytes / bin_s, busy / bin_s))
    return out


@dataclass(frozen=True, slots=True)
class JobRates:
    """A job's progress now: over the last ``window_s`` of packets, and in all."""

    job: str
    events: int
    events_per_s: float
    mb_per_s: float
    active_workers: float
    cpu_s: float


class LiveMonitor:
    """The numbers of a live progress view, fed a :class:`PacketRow` as each packet's result
    arrives: per job (and ``"all"``) the events/s, MB/s and mean active workers over the
    last ``window_s`` seconds of processing, and the totals.

    Packets are known only when their results arrive, so the window ends at the latest
    processing end seen, not at the clock: the view lags by a packet, never guesses."""

    ALL = "all"

    def __init__(self, window_s: float = 10.0) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s: must be positive, got {window_s!r}")
        self.window_s = window_s
        self._recent: dict[str, deque[PacketRow]] = {}
        self._events: dict[str, int] = {}
        self._cpu: dict[str, float] = {}
        self.latest_s = 0.0

    def add(self, row: PacketRow) -> None:
        self.latest_s = max(self.latest_s, row.end_s)
        for key in (row.job, self.ALL):
            self._recent.setdefault(key, deque()).append(row)
            self._events[key] = self._events.get(key, 0) + row.events
            self._cpu[key] = self._cpu.get(key, 0.0) + row.cpu_s

    def jobs(self) -> list[str]:
        """The jobs seen, in the order their first packets arrived (``"all"`` not included)."""
        return [k for k in self._recent if k != self.ALL]

    def rates(self, job: str = ALL) -> JobRates:
        recent = self._recent.get(job, deque())
        lo = self.latest_s - self.window_s
        while recent and recent[0].end_s < lo:  # arrived in order of results: about by end
            recent.popleft()
        events, mbytes, busy = _spread(list(recent), lo, self.latest_s)
        # Before a whole window has passed, divide by the time there has been.
        span = min(self.window_s, self.latest_s) or self.window_s
        return JobRates(
            job,
            self._events.get(job, 0),
            events / span,
            mbytes / span,
            busy / span,
            self._cpu.get(job, 0.0),
        )


def _csv_text(rows: list[dict[str, object]]) -> str:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


PACKET_COLUMNS = (
    "job",
    "worker",
    "node",
    "file",
    "events",
    "start_s",
    "end_s",
    "processing_s",
    "cpu_s",
    "bytes",
    "latency_s",
    "category",
    "read_from",
    "events_per_s",
)


def write_packets_csv(path: Path, rows: Sequence[PacketRow], **extra: object) -> Path:
    """The packet table as CSV (``extra`` columns, the same on every row, first)."""
    table: list[dict[str, object]] = [
        {
            **extra,
            "job": p.job,
            "worker": p.worker,
            "node": p.node,
            "file": p.file,
            "events": p.events,
            "start_s": round(p.start_s, 3),
            "end_s": round(p.end_s, 3),
            "processing_s": round(p.processing_s, 3),
            "cpu_s": round(p.cpu_s, 3),
            "bytes": round(p.n_bytes),
            "latency_s": round(p.latency_s, 3),
            "category": p.category,
            "read_from": p.read_from,
            "events_per_s": round(p.events / p.processing_s, 3) if p.processing_s > 0 else 0.0,
        }
        for p in rows
    ]
    if not table:
        atomic_write_text(path, ",".join([*extra, *PACKET_COLUMNS]) + "\n")
        return path
    atomic_write_text(path, _csv_text(table))
    return path


def write_progress_csv(path: Path, rows: Sequence[Progress], **extra: object) -> Path:
    atomic_write_text(
        path,
        _csv_text(
            [
                {
                    **extra,
                    "start_s": r.start_s,
                    "events_per_s": round(r.events_per_s, 3),
                    "mb_per_s": round(r.mb_per_s, 3),
                    "active_workers": round(r.active_workers, 3),
                }
                for r in rows
            ]
        ),
    )
    return path
