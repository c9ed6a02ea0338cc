"""Timelines of runs: why a policy wins, drawn from the packets' statistics.

One lane per worker (split in as many rows as it ran packets at once), each packet a bar from
when it started on its worker to when it ended, coloured by where its data came from: the
node's own cache, a peer's cache, tertiary storage (or a file staged for an earlier packet,
or read in place when the cache disk was full). Idle gaps are the white between bars. Several
runs are drawn one above the other on one time axis, so that their makespans compare at a
glance.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasched._files import atomic_write_bytes

if TYPE_CHECKING:
    from datasched.runtime.reports import PacketStat, RunReport

__all__ = ["SOURCE_COLOURS", "lanes", "plot_timelines", "timeline_figure"]

SOURCE_COLOURS = {
    "cache": ("#2ca02c", "own cache"),
    "peer": ("#1f77b4", "peer's cache"),
    "tertiary": ("#d62728", "tertiary storage"),
    "staged": ("#ff9896", "staged (fetched for an earlier packet)"),
    "direct": ("#9467bd", "read in place (cache disk full)"),
}


def _span(p: PacketStat) -> tuple[float, float]:
    """When the packet ran on its worker: its start, and its start plus read and compute."""
    return p.t_start, p.t_start + max(p.read_s + p.compute_s, 1e-3)


def lanes(report: RunReport) -> dict[str, list[list[PacketStat]]]:
    """Each worker's packets in rows that do not overlap (a worker runs packets at once on
    its threads: one row each), first fit in start order; workers in node order."""
    names = list(report.workers) or sorted({p.node for p in report.packets})
    out: dict[str, list[list[PacketStat]]] = {n: [] for n in names}
    for p in sorted(report.packets, key=lambda p: p.t_start):
        rows = out.setdefault(p.node, [])
        start, _ = _span(p)
        for row in rows:
            if _span(row[-1])[1] <= start + 1e-9:
                row.append(p)
                break
        else:
            rows.append([p])
    return out


def plot_timelines(runs: Mapping[str, RunReport], path: Path, *, title: str = "") -> Path:
    """The runs' timelines, one panel each on a shared time axis, as a PNG at ``path``
    (written atomically; drawn on matplotlib's Agg canvas, no global state)."""
    fig = timeline_figure(runs, title=title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())
    return path


LEGEND_IN = 0.45
"""Inches at the foot of the figure for the legend of the colours."""
TITLE_IN = 0.4
"""Inches at its head for the title."""


def timeline_figure(runs: Mapping[str, RunReport], *, title: str = "") -> Any:
    """The figure :func:`plot_timelines` draws (a matplotlib ``Figure`` on an Agg canvas).

    The title is at the head of the figure and the legend of the colours at its foot, each
    in a strip of its own that the panels are laid out between, so that neither covers the
    other nor a panel's own title, whatever the number of runs."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    layouts = {name: lanes(r) for name, r in runs.items()}
    heights = [max(sum(max(len(rows), 1) for rows in lay.values()), 1) for lay in layouts.values()]
    used = {p.source for r in runs.values() for p in r.packets}
    handles = [Patch(color=c, label=label) for s, (c, label) in SOURCE_COLOURS.items() if s in used]
    height_in = 1.2 + 0.32 * sum(heights) + 0.5 * len(runs)
    height_in += (LEGEND_IN if handles else 0) + (TITLE_IN if title else 0)
    fig = Figure(figsize=(10, height_in))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False, height_ratios=heights)[:, 0]
    end = max((r.makespan_s for r in runs.values()), default=1.0)
    for ax, (name, report) in zip(axes, runs.items(), strict=True):
        _panel(ax, name, report, layouts[name])
        end = max(end, *(_span(p)[1] for p in report.packets), 0.0)
    axes[-1].set_xlim(0, end * 1.02)
    axes[-1].set_xlabel("seconds since the run started")
    bottom = LEGEND_IN / height_in if handles else 0.0
    top = 1 - TITLE_IN / height_in if title else 1.0
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=len(handles),
            frameon=False,
            fontsize="small",
        )
    if title:
        fig.suptitle(title, y=1 - 0.5 * TITLE_IN / height_in, va="center", fontsize="medium")
    fig.tight_layout(rect=(0, bottom, 1, top))
    return fig


def _panel(ax: Any, name: str, report: RunReport, layout: dict[str, list[list[Any]]]) -> None:
    y = 0
    ticks, labels = [], []
    for worker, rows in layout.items():
        n_rows = max(len(rows), 1)
        for i, row in enumerate(rows):
            bars = [(a, b - a) for a, b in map(_span, row)]
            colours = [SOURCE_COLOURS.get(p.source, ("#7f7f7f", ""))[0] for p in row]
            ax.broken_barh(bars, (y + i + 0.1, 0.8), facecolors=colours, linewidth=0)
        ticks.append(y + n_rows / 2)
        labels.append(worker)
        y += n_rows
        ax.axhline(y, color="#cccccc", linewidth=0.5)
    ax.set_ylim(0, max(y, 1))
    ax.invert_yaxis()
    ax.set_yticks(ticks, labels)
    ax.axvline(report.makespan_s, color="black", linestyle="--", linewidth=1)
    ax.set_title(
        f"{name}: makespan {report.makespan_s:.1f} s, cache hits "
        f"{report.cache_hit_ratio:.0%}, {report.bytes_from_tertiary / 1e6:.1f} MB from tertiary",
        fontsize="small",
        loc="left",
    )
