"""The figures of :mod:`datasched.monitoring`, the same for both engines: the paper's
Figures 3-4 (active workers over time, and each packet's processing rate by where its data
lay), and a job's progress over time (events/s, MB/s, active workers per job)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasched._files import atomic_write_bytes
from datasched.monitoring import PacketRow, Progress, active_workers

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["packets_figure", "plot_packets", "plot_progress", "progress_figure"]

STYLE: dict[str, dict[str, Any]] = {
    "local": {"color": "tab:green", "marker": "o", "ms": 5},
    "other worker": {"color": "tab:blue", "marker": "s", "ms": 4, "mfc": "none"},
    "peer": {"color": "tab:blue", "marker": "s", "ms": 4, "mfc": "none"},
    "non-worker": {"color": "tab:red", "marker": "x", "ms": 4},
    "tertiary": {"color": "tab:red", "marker": "x", "ms": 4},
}
"""Markers that still show when packets of two categories go at the same rate."""


def _save(fig: Any, path: Path) -> Path:
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    return path


def plot_packets(
    runs: Sequence[tuple[str, Sequence[PacketRow], float]],
    n_workers: int,
    path: Path,
    *,
    title: str,
    categories: Sequence[str] = (),
) -> Path:
    """:func:`packets_figure`, written to ``path``."""
    return _save(packets_figure(runs, n_workers, title=title, categories=categories), path)


def packets_figure(
    runs: Sequence[tuple[str, Sequence[PacketRow], float]],
    n_workers: int,
    *,
    title: str,
    categories: Sequence[str] = (),
) -> Figure:
    """One column per run ``(label, rows, end_s)``: active workers over time (a), and every
    packet's processing rate at its end, by category (b); ``categories`` in legend order
    (default: as they appear). The title goes above the columns unless it is the one run's
    own label."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(runs), 7.5), layout="constrained")
    axes = fig.subplots(2, len(runs), squeeze=False, sharex=True)
    t_max = max((end for _, _, end in runs), default=1.0)
    rate_max = 0.0
    for col, (label, rows, end_s) in enumerate(runs):
        top, bottom = axes[0][col], axes[1][col]
        steps = active_workers(rows)
        xs = [0.0] + [t for t, _ in steps]
        ys = [0] + [n for _, n in steps]
        top.step(xs, ys, where="post", color="k")
        top.axhline(n_workers / 2, ls=":", color="0.5")
        top.set_ylim(0, max(n_workers, *ys) + 1)
        top.set_title(f"{label}: {end_s:,.0f} s" if end_s >= 10 else f"{label}: {end_s:.1f} s")
        top.set_ylabel("active workers")
        cats = list(categories) or list(dict.fromkeys(p.category for p in rows))
        for cat in cats:
            mine = [p for p in rows if p.category == cat and p.processing_s > 0]
            rates = [p.n_bytes / p.processing_s / 1e6 for p in mine]
            rate_max = max([rate_max, *rates])
            style = STYLE.get(cat, {"color": "0.4", "marker": ".", "ms": 4})
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
    if [label for label, _, _ in runs] != [title]:  # one run under its own name: said once
        fig.suptitle(title)
    return fig


def plot_progress(
    by_job: Mapping[str, Sequence[Progress]],
    path: Path,
    *,
    title: str,
    bin_s: float,
    total: Sequence[Progress] | None = None,
) -> Path:
    """Each job's events/s, MB/s and active workers over time (:func:`progress_figure`),
    written to ``path``."""
    fig = progress_figure(by_job, title=title, bin_s=bin_s, total=total)
    return _save(fig, path)


def progress_figure(
    by_job: Mapping[str, Sequence[Progress]],
    *,
    title: str,
    bin_s: float,
    total: Sequence[Progress] | None = None,
) -> Figure:
    """Each job's events/s, MB/s and active workers over time, one line a job, each bin of
    ``bin_s`` drawn to its end (the last one too); ``total`` (all jobs together), when
    given, as a wide grey line under the jobs' so that a job alone in a bin stays seen."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 8), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    lines: list[tuple[str, Sequence[Progress], dict[str, Any]]] = []
    if total is not None:
        lines.append(("all jobs", total, {"color": "0.7", "linewidth": 4, "zorder": 1}))
    lines += [(job, rows, {"zorder": 2}) for job, rows in by_job.items()]
    end = 0.0
    for job, rows, style in lines:
        if not rows:
            continue
        xs = [r.start_s for r in rows] + [rows[-1].start_s + bin_s]
        end = max(end, xs[-1])
        for ax, ys in zip(
            axes,
            (
                [r.events_per_s for r in rows],
                [r.mb_per_s for r in rows],
                [r.active_workers for r in rows],
            ),
            strict=True,
        ):
            ax.step(xs, [*ys, ys[-1]], where="post", label=job, **style)
    for ax, label in zip(axes, ("events/s", "MB/s", "active workers"), strict=True):
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        if end > 0:
            ax.set_xlim(0, end)
    axes[-1].set_xlabel("time [s]")
    if 1 < len(lines) <= 13:
        axes[0].legend(fontsize="small")
    fig.suptitle(title)
    return fig
