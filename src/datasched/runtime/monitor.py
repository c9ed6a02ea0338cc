"""Monitoring as PROOF keeps it, from the runtime's packet statistics: each
:class:`PacketStat` becomes a :class:`~datasched.monitoring.PacketRow` (the format the
simulator writes too), and :func:`write_monitor_report` writes what ``datasched run --report``
adds to the timeline: the packet table, each job's progress over time, and the figures.

A packet's processing is its reading and computing on its worker, from its start there; its
latency is how long its worker waited for it (PROOF's packet latency): from the end of the
worker's previous packet to this one's start, the master's round trip when nothing was queued
on the worker. A node is one worker here (with several slots, a slot's wait can hide behind
another's packet). Categories by where its data came from: *local* (the worker's cache, or
a copy staged there for an earlier packet), *peer* (another worker's cache), *tertiary*
(central storage, or read in place).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasched._files import atomic_write_text
from datasched.monitoring import (
    PacketRow,
    Progress,
    progress,
    write_packets_csv,
)
from datasched.runtime.reports import PacketStat, RunReport

__all__ = [
    "CATEGORIES",
    "CATEGORY_OF_SOURCE",
    "packet_row",
    "packet_rows",
    "progress_by_job",
    "write_monitor_report",
]

CATEGORIES = ("local", "peer", "tertiary")
CATEGORY_OF_SOURCE = {
    "cache": "local",
    "staged": "local",
    "peer": "peer",
    "tertiary": "tertiary",
    "direct": "tertiary",
}


def packet_row(p: PacketStat, previous_end: float | None = None) -> PacketRow:
    """One packet of the runtime as the monitor keeps it; ``previous_end``: when its worker's
    packet before it ended processing (None: its first), for its latency."""
    end = p.t_start + p.read_s + p.compute_s
    return PacketRow(
        job=p.job,
        worker=p.node,
        node=p.node,
        file=p.url,
        events=p.n_events,
        start_s=p.t_start,
        end_s=end,
        cpu_s=p.cpu_s,
        n_bytes=float(p.bytes_read),
        category=CATEGORY_OF_SOURCE.get(p.source, p.source),
        read_from=p.node if p.source in ("cache", "staged") else p.source,
        latency_s=0.0 if previous_end is None else max(p.t_start - previous_end, 0.0),
    )


def packet_rows(stats: Sequence[PacketStat]) -> list[PacketRow]:
    """The packets as rows, in their order, each with its latency: how long its worker
    waited for it after its previous packet's processing ended (PROOF's packet latency;
    a worker's first packet has none)."""
    last: dict[str, float] = {}
    latency: dict[int, PacketRow] = {}
    for i in sorted(range(len(stats)), key=lambda i: (stats[i].node, stats[i].t_start)):
        p = stats[i]
        latency[i] = packet_row(p, last.get(p.node))
        last[p.node] = max(last.get(p.node, 0.0), latency[i].end_s)
    return [latency[i] for i in range(len(stats))]


def progress_by_job(
    rows: Sequence[PacketRow], bin_s: float | None = None
) -> tuple[float, dict[str, list[Progress]]]:
    """Each job's progress in bins (about 60 over the run unless ``bin_s``), and the bin."""
    end = max((r.end_s for r in rows), default=0.0)
    if bin_s is None:
        bin_s = max(end / 60, 0.5)
    jobs = list(dict.fromkeys(r.job for r in rows))
    return bin_s, {j: progress([r for r in rows if r.job == j], bin_s, end) for j in jobs}


def write_monitor_report(report: RunReport, directory: Path, title: str) -> dict[str, Any]:
    """The monitor's part of ``--report``: ``monitor_packets.csv`` (a row a packet, the
    simulator's format), ``progress.csv`` (each job's and all jobs' events/s, MB/s and active
    workers over time), ``progress.png`` and ``packets.png`` (active workers, and each
    packet's rate by category: the paper's Figs. 3-4). Returns what it wrote, by name."""
    from datasched.monitoring_plots import plot_packets, plot_progress

    rows = packet_rows(report.packets)
    end = max((r.end_s for r in rows), default=0.0)
    bin_s, by_job = progress_by_job(rows)
    overall = progress(rows, bin_s, end)
    table = [*((j, r) for j, rs in by_job.items() for r in rs), *(("all", r) for r in overall)]
    written = {"packets": write_packets_csv(directory / "monitor_packets.csv", rows)}
    # One CSV for all jobs: the job's name first ("all" for the run as a whole).
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["job", "start_s", "events_per_s", "mb_per_s", "active_workers"])
    for job, r in table:
        out.writerow(
            [job, r.start_s, round(r.events_per_s, 3), round(r.mb_per_s, 3),
             round(r.active_workers, 3)]
        )  # fmt: skip
    written["progress"] = directory / "progress.csv"
    atomic_write_text(written["progress"], buf.getvalue())
    written["progress_plot"] = plot_progress(
        by_job,
        directory / "progress.png",
        title=f"{title}: progress",
        bin_s=bin_s,
        total=overall if len(by_job) > 1 else None,
    )
    n_workers = max(len(report.workers), len({r.worker for r in rows}), 1)
    written["packets_plot"] = plot_packets(
        [(title, rows, end)],
        n_workers,
        directory / "packets.png",
        title=title,
        categories=CATEGORIES,
    )
    return written
