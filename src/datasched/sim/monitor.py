"""Monitoring as PROOF keeps it (the benchmark package of ganis et al. §2.2, ROOT's
``TPerfStats``), from the simulator's packet log: a row per packet (worker, node, file,
events, processing and CPU time, bytes, where the data came from), the job's progress over
time (events/s, MB/s, active workers) and the figures of the paper's §2.3: active workers over
time, and the processing rate of each packet by category.

Categories are the paper's: *local* (the worker's own disk), *other worker* (the disk of
another node with a worker of the job), *non-worker* (a node with no worker, a file server, or
central storage). The simulator hands out a packet at once, so it has no latency to record.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from datasched._files import atomic_write_bytes, atomic_write_text
from datasched.core.model import Source
from datasched.sim.recorder import PacketRecord

__all__ = [
    "CATEGORIES",
    "Progress",
    "active_workers",
    "category",
    "plot_packets",
    "progress",
    "tail_fraction",
    "write_packets_csv",
    "write_progress_csv",
]

CATEGORIES = ("local", "other worker", "non-worker")
_STYLE = {
    "local": {"color": "tab:green", "marker": "o", "ms": 5},
    "other worker": {"color": "tab:blue", "marker": "s", "ms": 4, "mfc": "none"},
    "non-worker": {"color": "tab:red", "marker": "x", "ms": 4},
}
"""Markers that still show when packets of two categories go at the same rate."""


def category(packet: PacketRecord, worker_nodes: Iterable[int] | set[int]) -> str:
    """Where a packet's data lay, in the paper's three categories."""
    if packet.source == Source.CACHE:
        return "local"
    if packet.source == Source.PEER and packet.peer in worker_nodes:
        return "other worker"
    return "non-worker"


def active_workers(packets: Sequence[PacketRecord]) -> list[tuple[float, int]]:
    """The number of workers processing a packet, as steps ``(time, count from then on)``."""
    changes: dict[float, int] = {}
    for p in packets:
        changes[p.start_s] = changes.get(p.start_s, 0) + 1
        changes[p.end_s] = changes.get(p.end_s, 0) - 1
    steps: list[tuple[float, int]] = []
    n = 0
    for t in sorted(changes):
        n += changes[t]
        steps.append((t, n))
    return steps


def tail_fraction(
    packets: Sequence[PacketRecord], n_workers: int, start_s: float, end_s: float
) -> float:
    """The fraction of ``[start_s, end_s]`` during which fewer than half the ``n_workers``
    were processing a packet (the issue's measure of a tail)."""
    if end_s <= start_s:
        return 0.0
    below = 0.0
    at, n = start_s, 0
    for t, count in active_workers(packets):
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


def progress(packets: Sequence[PacketRecord], bin_s: float, end_s: float) -> list[Progress]:
    """Events/s, MB/s and mean active workers per bin of ``bin_s``, each packet's events and
    bytes spread evenly over its processing time."""
    n_bins = max(int(end_s / bin_s + 0.999999), 1)
    events = [0.0] * n_bins
    mbytes = [0.0] * n_bins
    busy = [0.0] * n_bins
    for p in packets:
        span = p.end_s - p.start_s
        first, last = int(p.start_s // bin_s), min(int(p.end_s // bin_s), n_bins - 1)
        for b in range(first, last + 1):
            overlap = min(p.end_s, (b + 1) * bin_s) - max(p.start_s, b * bin_s)
            if overlap <= 0:
                continue
            share = overlap / span if span > 0 else 1.0
            events[b] += p.events * share
            mbytes[b] += p.n_bytes * share / 1e6
            busy[b] += overlap
    return [
        Progress(b * bin_s, events[b] / bin_s, mbytes[b] / bin_s, busy[b] / bin_s)
        for b in range(n_bins)
    ]


def _rows(packets: Sequence[PacketRecord], worker_nodes: set[int]) -> list[dict[str, object]]:
    return [
        {
            "job": p.job_id,
            "worker": p.slot,
            "node": p.node,
            "file": p.file,
            "events": p.events,
            "start_s": round(p.start_s, 3),
            "end_s": round(p.end_s, 3),
            "processing_s": round(p.end_s - p.start_s, 3),
            "cpu_s": round(p.cpu_s, 3),
            "bytes": round(p.n_bytes),
            "category": category(p, worker_nodes),
            "read_from": p.node if p.source == Source.CACHE else p.peer,
            "events_per_s": round(p.events / (p.end_s - p.start_s), 3)
            if p.end_s > p.start_s
            else 0.0,
        }
        for p in packets
    ]


def _write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path


def write_packets_csv(
    path: Path, packets: Sequence[PacketRecord], worker_nodes: set[int], **extra: object
) -> Path:
    """The packet table as CSV (``extra`` columns, the same on every row, first)."""
    return _write_csv(path, [{**extra, **r} for r in _rows(packets, worker_nodes)])


def write_progress_csv(path: Path, rows: Sequence[Progress], **extra: object) -> Path:
    return _write_csv(
        path,
        [
            {
                **extra,
                "start_s": r.start_s,
                "events_per_s": round(r.events_per_s, 3),
                "mb_per_s": round(r.mb_per_s, 3),
                "active_workers": round(r.active_workers, 3),
            }
            for r in rows
        ],
    )


def plot_packets(
    runs: Sequence[tuple[str, Sequence[PacketRecord], float]],
    worker_nodes: set[int],
    n_workers: int,
    path: Path,
    *,
    title: str,
) -> Path:
    """The paper's Figures 3-4, one column per run ``(label, packets, end_s)``: active
    workers over time (a), and every packet's processing rate at its end, by category (b)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(runs), 7.5), layout="constrained")
    axes = fig.subplots(2, len(runs), squeeze=False, sharex=True)
    t_max = max((end for _, _, end in runs), default=1.0)
    rate_max = 0.0
    for col, (label, packets, end_s) in enumerate(runs):
        top, bottom = axes[0][col], axes[1][col]
        steps = active_workers(packets)
        xs = [0.0] + [t for t, _ in steps]
        ys = [0] + [n for _, n in steps]
        top.step(xs, ys, where="post", color="k")
        top.axhline(n_workers / 2, ls=":", color="0.5")
        top.set_ylim(0, n_workers + 1)
        top.set_title(f"{label}: {end_s:,.0f} s")
        top.set_ylabel("active workers")
        for cat in CATEGORIES:
            mine = [p for p in packets if category(p, worker_nodes) == cat and p.end_s > p.start_s]
            rates = [p.n_bytes / (p.end_s - p.start_s) / 1e6 for p in mine]
            rate_max = max([rate_max, *rates])
            style = _STYLE[cat]
            bottom.plot(
                [p.end_s for p in mine],
                rates,
                ls="none",
                label=cat,
                color=style["color"],
                marker=style["marker"],
                ms=style["ms"],
                mfc=style.get("mfc", style["color"]),
            )
        bottom.set_xlabel("time [s]")
        bottom.set_ylabel("packet processing rate [MB/s]")
        bottom.set_xlim(0, t_max * 1.02)
        bottom.legend(fontsize="small")
    for col in range(len(runs)):
        axes[1][col].set_ylim(0, rate_max * 1.1 or 1.0)
    fig.suptitle(title)
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    return path
