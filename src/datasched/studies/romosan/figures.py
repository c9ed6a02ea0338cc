"""The figures of the romosan reproduction: each a CSV of its points and a PNG, one panel per
measure, one curve per policy (or per delay, or per network)."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasched._files import write_csv_and_png
from datasched.studies.romosan.runs import FIFO, LP, SJF, EdgePoint, RunResult

__all__ = ["RomosanFigure", "romosan_figures", "write_romosan_figure"]

_NAMES = {FIFO: "FIFO", SJF: "SJF", LP: "LP (min-cost flow)"}


@dataclass(frozen=True)
class Panel:
    """One panel: ``y`` (a column) against ``x``, a curve per value of ``series``."""

    y: str
    label: str
    log: bool = False


@dataclass
class RomosanFigure:
    """A figure's title, points and panels, and where it was written."""

    key: str
    title: str
    rows: list[dict[str, Any]]
    x: str
    x_label: str
    series: str
    panels: tuple[Panel, ...]
    log_x: bool = False
    csv_path: Path | None = None
    png_path: Path | None = None


def _runs(results: Sequence[RunResult], keep: Callable[[RunResult], bool]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        if keep(r):
            rows.append({**r.row(), "copies": r.copies, "label": _NAMES.get(r.policy, r.policy)})
    return rows


def romosan_figures(
    results: Sequence[RunResult], edges: Sequence[EdgePoint]
) -> list[RomosanFigure]:
    """The reproduction's figures, in the paper's order."""
    servers = _runs(results, lambda r: r.experiment == "servers")
    jobs = max((r["jobs_completed"] for r in servers), default=0)
    files = max((r.files for r in results), default=0)
    what = f"{jobs:,} jobs, {files:,} files"
    figs = [
        RomosanFigure(
            "servers_copies",
            f"{what}: copies against servers",
            servers,
            "servers",
            "servers",
            "label",
            (Panel("local_copies", "local copies"), Panel("remote_copies", "remote copies")),
            log_x=True,
        ),
        RomosanFigure(
            "servers_utilization",
            f"{what}: server utilization and makespan",
            servers,
            "servers",
            "servers",
            "label",
            (Panel("utilization", "utilization"), Panel("makespan_h", "makespan [h]", log=True)),
            log_x=True,
        ),
        RomosanFigure(
            "servers_scheduler_time",
            f"{what}: scheduler time",
            servers,
            "servers",
            "servers",
            "label",
            (Panel("scheduler_s", "scheduler time [s]", log=True),),
            log_x=True,
        ),
    ]
    edge_rows: list[dict[str, Any]] = []
    for e in edges:
        for label, value in (
            ("grouped network, solve", e.solve_s),
            ("full network (the paper's), solve", e.solve_full_s),
            ("whole batch (grouped)", e.batch_s),
        ):
            if not math.isnan(value):
                edge_rows.append({**e.row(), "label": label, "seconds": value})
    figs.append(
        RomosanFigure(
            "edges",
            f"one batch, {max((e.jobs for e in edges), default=0):,} queued jobs, 32 servers",
            edge_rows,
            "edges",
            "file-to-server edges (files x servers)",
            "label",
            (Panel("seconds", "seconds", log=True),),
            log_x=True,
        )
    )
    zipf = [r for r in results if r.experiment == "zipf"]
    caches = sorted({r.cache_gb for r in zipf})
    for cache_name, cache in zip(("small", "infinite"), caches[:1] + caches[-1:], strict=False):
        size = f"{cache:g} GB a server" if cache_name == "small" else "never full"
        figs.append(
            RomosanFigure(
                f"zipf_{cache_name}_cache",
                f"Zipf popularity, {max(r.jobs_completed for r in zipf):,} jobs, {cache_name} "
                f"cache ({size})",
                [r for r in _runs(zipf, lambda _: True) if r["cache_gb"] == cache],
                "servers",
                "servers",
                "label",
                (
                    Panel("local_copies", "local copies"),
                    Panel("remote_copies", "remote copies"),
                    Panel("makespan_h", "makespan [h]", log=True),
                ),
                log_x=True,
            )
        )
    delays = _runs(
        results,
        lambda r: r.policy == LP and r.experiment in ("servers", "delays"),
    )
    for row in delays:
        row["label"] = f"every {row['lp_period_s']:g} s" if row["lp_period_s"] else "no delay"
    periods = {r.lp_period_s for r in results if r.experiment == "delays"}
    delay_servers = {r.servers for r in results if r.experiment == "delays"}
    delays = [r for r in delays if r["servers"] in delay_servers]
    if periods:
        figs.append(
            RomosanFigure(
                "delays",
                "delays between LPs: scheduler time and local copies",
                delays,
                "servers",
                "servers",
                "label",
                (
                    Panel("scheduler_s", "scheduler time [s]", log=True),
                    Panel("local_copies", "local copies"),
                    Panel("makespan_h", "makespan [h]", log=True),
                ),
                log_x=True,
            )
        )
    return figs


def write_romosan_figure(fig: RomosanFigure, out_dir: Path) -> RomosanFigure:
    """Write ``<key>.csv`` and ``<key>.png`` into ``out_dir``."""
    fig.csv_path, fig.png_path = write_csv_and_png(out_dir, fig.key, fig.rows, lambda: _png(fig))
    return fig


def _png(fig: RomosanFigure) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(fig.panels)
    figure, axes = plt.subplots(1, n, figsize=(max(4.6 * n, 6.4), 3.8), squeeze=False)
    labels = list(dict.fromkeys(r[fig.series] for r in fig.rows))
    for ax, panel in zip(axes[0], fig.panels, strict=True):
        for label in labels:
            points = sorted(
                (r[fig.x], r[panel.y])
                for r in fig.rows
                if r[fig.series] == label and not _missing(r[panel.y])
            )
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", ms=4, label=label)
        ax.set_xlabel(fig.x_label)
        ax.set_ylabel(panel.label)
        if fig.log_x:
            ax.set_xscale("log", base=2 if fig.x == "servers" else 10)
            if fig.x == "servers":
                ticks = sorted({r[fig.x] for r in fig.rows})
                ax.set_xticks(ticks, [str(t) for t in ticks])
                ax.minorticks_off()
        if panel.log:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(fig.title, fontsize=10)
    figure.tight_layout()
    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=110)
    plt.close(figure)
    return buf.getvalue()


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
