"""Monitoring as PROOF keeps it, from the simulator's packet log: each
:class:`PacketRecord` becomes a :class:`~datasched.monitoring.PacketRow` (the format the
runtime writes too), with the paper's categories (§2.2): *local* (the worker's own disk),
*other worker* (the disk of another node with a worker of the job), *non-worker* (a node with
no worker, a file server, or central storage). The simulator hands out a packet at once, so it
has no latency to record.

The functions here take the simulator's records and the job's worker nodes, and hand the rows
to :mod:`datasched.monitoring` and :mod:`datasched.monitoring_plots`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from datasched import monitoring
from datasched.core.model import Source
from datasched.monitoring import PacketRow, Progress, write_progress_csv
from datasched.sim.recorder import PacketRecord

__all__ = [
    "CATEGORIES",
    "Progress",
    "active_workers",
    "category",
    "plot_packets",
    "progress",
    "rows",
    "tail_fraction",
    "write_packets_csv",
    "write_progress_csv",
]

CATEGORIES = ("local", "other worker", "non-worker")


def category(packet: PacketRecord, worker_nodes: Iterable[int] | set[int]) -> str:
    """Where a packet's data lay, in the paper's three categories."""
    if packet.source == Source.CACHE:
        return "local"
    if packet.source == Source.PEER and packet.peer in worker_nodes:
        return "other worker"
    return "non-worker"


def rows(packets: Sequence[PacketRecord], worker_nodes: Iterable[int] = ()) -> list[PacketRow]:
    """The packets as the monitor keeps them (the same rows as the runtime's)."""
    workers = set(worker_nodes)
    return [
        PacketRow(
            job=str(p.job_id),
            worker=str(p.slot),
            node=str(p.node),
            file=str(p.file),
            events=p.events,
            start_s=p.start_s,
            end_s=p.end_s,
            cpu_s=p.cpu_s,
            n_bytes=p.n_bytes,
            category=category(p, workers),
            read_from=str(p.node if p.source == Source.CACHE else p.peer),
        )
        for p in packets
    ]


def active_workers(packets: Sequence[PacketRecord]) -> list[tuple[float, int]]:
    """The number of workers processing a packet, as steps ``(time, count from then on)``."""
    return monitoring.active_workers(rows(packets))


def tail_fraction(
    packets: Sequence[PacketRecord], n_workers: int, start_s: float, end_s: float
) -> float:
    """The fraction of ``[start_s, end_s]`` during which fewer than half the ``n_workers``
    were processing a packet (the issue's measure of a tail)."""
    return monitoring.tail_fraction(rows(packets), n_workers, start_s, end_s)


def progress(packets: Sequence[PacketRecord], bin_s: float, end_s: float) -> list[Progress]:
    """Events/s, MB/s and mean active workers per bin of ``bin_s``."""
    return monitoring.progress(rows(packets), bin_s, end_s)


def write_packets_csv(
    path: Path, packets: Sequence[PacketRecord], worker_nodes: set[int], **extra: object
) -> Path:
    """The packet table as CSV (``extra`` columns, the same on every row, first)."""
    return monitoring.write_packets_csv(path, rows(packets, worker_nodes), **extra)


def plot_packets(
    runs: Sequence[tuple[str, Sequence[PacketRecord], float]],
    worker_nodes: set[int],
    n_workers: int,
    path: Path,
    *,
    title: str,
) -> Path:
    """The paper's Figures 3-4, one column per run ``(label, packets, end_s)``."""
    from datasched.monitoring_plots import plot_packets as plot

    return plot(
        [(label, rows(packets, worker_nodes), end) for label, packets, end in runs],
        n_workers,
        path,
        title=title,
        categories=CATEGORIES,
    )
