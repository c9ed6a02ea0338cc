"""The figures of the grid reproduction (ranganathan-foster Figs. 3-5): each a CSV of its
bars and a PNG, the external schedulers along x, a bar per dataset scheduler (or, for
Fig. 5, per bandwidth). JobAdaptive (the paper's future work) stands beside the four."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasched._files import write_csv_and_png
from datasched.policies.grid.schedulers import DATA_LEAST_LOADED
from datasched.studies.grid.runs import DATASET_SCHEDULERS, Summary, pairs_at

__all__ = ["GridFigure", "grid_figures", "write_grid_figure"]


@dataclass
class GridFigure:
    """A bar chart: ``rows`` of (x, series, value)."""

    key: str
    title: str
    y_label: str
    rows: list[dict[str, Any]]
    csv_path: Path | None = None
    png_path: Path | None = None


def _bars(
    summaries: Sequence[Summary], bw: float, measure: str, series: Sequence[str]
) -> list[dict[str, Any]]:
    at = pairs_at(summaries, bw)
    externals = list(dict.fromkeys(e for e, _ in at))
    return [
        {"x": e, "series": d, "value": round(getattr(at[e, d], measure), 3)}
        for e in externals
        for d in series
        if (e, d) in at
    ]


def grid_figures(summaries: Sequence[Summary], slow: float, fast: float) -> list[GridFigure]:
    """Figs. 3a, 3b, 4 at the slow network and 5 (both networks, DataLeastLoaded)."""
    figs = [
        GridFigure(
            "fig3a_response",
            f"Fig. 3a: average response time, {slow:g} MB/s",
            "response time (s)",
            _bars(summaries, slow, "response_s", DATASET_SCHEDULERS),
        ),
        GridFigure(
            "fig3b_transfer",
            f"Fig. 3b: data transferred per job, {slow:g} MB/s",
            "MB per job",
            _bars(summaries, slow, "mb_per_job", DATASET_SCHEDULERS),
        ),
        GridFigure(
            "fig4_idle",
            f"Fig. 4: processors' idle time, {slow:g} MB/s",
            "idle time (%)",
            _bars(summaries, slow, "idle_pct", DATASET_SCHEDULERS),
        ),
    ]
    rows = []
    for bw in (slow, fast):
        for r in _bars(summaries, bw, "response_s", (DATA_LEAST_LOADED,)):
            rows.append({**r, "series": f"{bw:g} MB/s"})
    figs.append(
        GridFigure(
            "fig5_bandwidth",
            f"Fig. 5: response time at {slow:g} and {fast:g} MB/s ({DATA_LEAST_LOADED})",
            "response time (s)",
            rows,
        )
    )
    return figs


def write_grid_figure(fig: GridFigure, out_dir: Path) -> GridFigure:
    """Write ``<key>.csv`` and ``<key>.png`` into ``out_dir``."""
    fig.csv_path, fig.png_path = write_csv_and_png(
        out_dir, fig.key, fig.rows, lambda: _png(fig), columns=("x", "series", "value")
    )
    return fig


def _png(fig: GridFigure) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(dict.fromkeys(r["x"] for r in fig.rows))
    series = list(dict.fromkeys(r["series"] for r in fig.rows))
    value = {(r["x"], r["series"]): r["value"] for r in fig.rows}
    figure, ax = plt.subplots(figsize=(7.2, 3.8))
    width = 0.8 / max(len(series), 1)
    for k, s in enumerate(series):
        pos = [i + (k - (len(series) - 1) / 2) * width for i in range(len(xs))]
        ax.bar(pos, [value.get((x, s), 0.0) for x in xs], width, label=s)
    ax.set_xticks(range(len(xs)), xs, fontsize=8)
    ax.set_ylabel(fig.y_label)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(fig.title, fontsize=10)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=110)
    plt.close(figure)
    return out.getvalue()
