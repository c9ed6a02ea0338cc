"""Figures: speedup and waiting time against load (our version of ponce-hersch Figure 3)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from datasched.sim.metrics import Summary

__all__ = ["plot_sweep", "series_label"]


def series_label(s: Summary) -> str:
    """How a curve is named in a legend: policy, cache size where it matters, pipelining."""
    label = s.policy
    if s.policy not in ("farm", "splitting"):
        label += f" {s.cache_gb:g} GB"
    if s.pipeline != "none":
        label += f" ({s.pipeline} pipelining)"
    return label


def plot_sweep(summaries: Sequence[Summary], path: Path, *, title: str = "") -> Path:
    """Two panels, mean speedup (top) and mean waiting time (bottom, log) against load.

    Overloaded runs are left out: as in the paper, "curves are cut at high loads when the
    system ... becomes overloaded". The PNG is written to a temporary name and renamed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[Summary]] = {}
    for s in summaries:
        series.setdefault(series_label(s), []).append(s)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True)
    for label, runs in series.items():
        ok = sorted((r for r in runs if not r.overloaded), key=lambda r: r.load_jobs_per_h)
        loads = [r.load_jobs_per_h for r in ok]
        top.plot(loads, [r.mean_speedup for r in ok], marker="o", label=label)
        waits = [max(r.mean_wait_s / 3600, 1e-3) for r in ok]
        bottom.plot(loads, waits, marker="o", label=label)
    top.set_ylabel("mean speedup")
    top.grid(True, alpha=0.3)
    top.legend(fontsize="small")
    bottom.set_yscale("log")
    bottom.set_ylabel("mean waiting time [h] (0 drawn at 0.001)")
    bottom.set_xlabel("load [jobs/h]")
    bottom.grid(True, which="both", alpha=0.3)
    nodes = summaries[0].n_nodes if summaries else 0
    fig.suptitle(title or f"Speedup and waiting time against load, {nodes} nodes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path
