"""The live view of a run on the cluster: rich progress bars (one per job and one overall,
with events/s and cache hits) and, under them, PROOF's monitor as the packets' results arrive:
per job the events/s, MB/s and active workers over the last seconds, events and CPU time
so far (:class:`datasched.monitoring.LiveMonitor`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.console import RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from datasched.cli.common import err
from datasched.monitoring import LiveMonitor

if TYPE_CHECKING:
    from datasched.runtime.reports import PacketStat

__all__ = ["BarProgress", "MonitoredProgress", "monitor_table", "progress_bars"]

WINDOW_S = 10.0
"""Seconds of processing the live rates are averaged over."""


def monitor_table(monitor: LiveMonitor, max_jobs: int = 12) -> Table:
    """The monitor's numbers now: a row per job (the latest ``max_jobs``), and all jobs."""
    table = Table(
        title=f"packets, last {monitor.window_s:g} s of processing",
        title_justify="left",
        box=None,
        padding=(0, 1),
    )
    for col in ("job", "events", "events/s", "MB/s", "active workers", "CPU"):
        table.add_column(col, justify="left" if col == "job" else "right")
    jobs = monitor.jobs()
    for key in [*jobs[-max_jobs:], *([monitor.ALL] if len(jobs) > 1 else [])]:
        r = monitor.rates(key)
        table.add_row(
            "all jobs" if key == monitor.ALL else key,
            f"{r.events:,}",
            f"{r.events_per_s:,.0f}",
            f"{r.mb_per_s:,.1f}",
            f"{r.active_workers:.1f}",
            f"{r.cpu_s:,.1f} s",
        )
    return table


class MonitoredProgress(Progress):
    """Progress bars with the monitor's table under them once packets have come back."""

    monitor: LiveMonitor | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield from super().get_renderables()
        if self.monitor is not None and self.monitor.jobs():
            yield monitor_table(self.monitor)


class BarProgress:
    """The run's progress sink: bars per job and overall, and the live monitor."""

    def __init__(self, progress: Progress, total_events: int) -> None:
        self.progress = progress
        self.total_events = total_events
        self.total: TaskID | None = None
        """The overall bar, shown once a job starts (nothing shows before the cluster is up)."""
        self.tasks: dict[str, TaskID] = {}
        self.done = 0
        self.hits = 0
        self.t0 = time.monotonic()
        self.monitor = LiveMonitor(WINDOW_S)
        self._last_end: dict[str, float] = {}
        if isinstance(progress, MonitoredProgress):
            progress.monitor = self.monitor

    def job_started(self, job_id: str, n_events: int) -> None:
        if self.total is None:
            self.total = self.progress.add_task("all jobs", total=self.total_events, hits="")
        self.tasks[job_id] = self.progress.add_task(job_id, total=n_events, hits="")

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None:
        self.done += n_events
        self.hits += n_events if from_cache else 0
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        note = f"{rate:,.0f} ev/s  cache {self.hits / max(self.done, 1):.0%}"
        self.progress.update(self.tasks[job_id], advance=n_events)
        if self.total is not None:
            self.progress.update(self.total, advance=n_events, hits=note)

    def packet_stat(self, stat: PacketStat) -> None:
        from datasched.runtime.monitor import packet_row

        row = packet_row(stat, self._last_end.get(stat.node))
        self._last_end[stat.node] = max(self._last_end.get(stat.node, 0.0), row.end_s)
        self.monitor.add(row)

    def job_held(self, job_id: str, why: str) -> None:
        task = self.tasks.get(job_id)
        if task is not None:
            self.progress.update(task, description=f"{job_id} [{why}]")

    def job_released(self, job_id: str) -> None:
        task = self.tasks.get(job_id)
        if task is not None:
            self.progress.update(task, description=job_id)

    def note(self, line: str) -> None:
        if not self.progress.disable:
            self.progress.console.print(
                f"note: {line}", markup=False, highlight=False, soft_wrap=True
            )

    def job_done(self, job_id: str, status: str) -> None:
        task = self.tasks.get(job_id)
        if task is not None:
            self.progress.update(task, description=f"{job_id} [{status}]")


def progress_bars(quiet: bool) -> MonitoredProgress:
    return MonitoredProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[hits]}"),
        console=err,
        disable=quiet,
        transient=False,
    )
