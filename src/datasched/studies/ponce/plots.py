"""Figures: mean speedup and mean waiting time against load (ponce-hersch §3.4, Figure 3).

Used by ``datasched sweep`` and ``datasched demo-sim``, and meant for the reproduction reports:
give it the summaries of a load sweep and it draws one curve per series (policy, cache size
where it matters, pipelining).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from datasched._files import atomic_write_bytes
from datasched.core.policy import ParamError
from datasched.policies import UnknownPolicyError, build_policy
from datasched.sim.metrics import Summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["WAIT_FLOOR_H", "plot_sweep", "series_label", "uses_cache"]

WAIT_FLOOR_H = 1e-3
"""Mean waits below this (3.6 s, zero included) sit on the floor of the log axis, as open
triangles: a log scale has no zero, and the paper's Figure 3 stops at a few minutes too."""


def uses_cache(policy: str) -> bool:
    """Whether the cache size can change a policy's results (an unknown name: assume so)."""
    try:
        reads = build_policy(policy).reads
    except (UnknownPolicyError, ParamError):
        return True
    return reads.cache_fill or reads.peer_reads


def series_label(s: Summary, *, with_cache: bool | None = None) -> str:
    """How a curve is named in a legend: policy, cache size where it matters, pipelining.

    ``with_cache`` forces the cache size in or out; by default it is named for the policies
    that use the node caches.
    """
    if with_cache is None:
        with_cache = uses_cache(s.policy)
    label = s.policy
    if with_cache:
        label += f" {s.cache_gb:g} GB"
    if s.pipeline != "none":
        label += f", {s.pipeline} pipelining"
    return label


def _overload_note(runs: Sequence[Summary]) -> str:
    """Legend suffix saying at which loads the series was cut for overload."""
    over = sorted(r.load_jobs_per_h for r in runs if r.overloaded)
    if not over:
        return ""
    if all(r.overloaded for r in runs if r.load_jobs_per_h >= over[0]):
        return f" (overloaded from {over[0]:g} jobs/h on)"
    return f" (overloaded at {', '.join(f'{x:g}' for x in over)} jobs/h)"


def _series(summaries: Sequence[Summary]) -> dict[str, list[Summary]]:
    """Runs grouped into curves, in order of first appearance."""
    caches: dict[str, set[float]] = {}
    for s in summaries:
        caches.setdefault(s.policy, set()).add(s.cache_gb)
    series: dict[str, list[Summary]] = {}
    for s in summaries:
        with_cache = uses_cache(s.policy) or len(caches[s.policy]) > 1
        series.setdefault(series_label(s, with_cache=with_cache), []).append(s)
    return series


def plot_sweep(summaries: Sequence[Summary], path: Path, *, title: str = "") -> Path:
    """Draw mean speedup (top) and mean waiting time in hours (bottom, log) against load.

    Overloaded runs are left out: as in the paper, "the curves on the graph are cut at high
    loads when the system leaves the steady state and becomes overloaded"; the legend says
    where. The PNG is written under a temporary name beside ``path`` and renamed, so ``path``
    is either the old file or the whole new one. Returns ``path``.
    """
    # The object-oriented API renders with Agg without touching pyplot's global backend,
    # so this works headless and inside a notebook alike.
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(8.5, 8.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    floored_any = drawn_any = False
    for i, (label, runs) in enumerate(_series(summaries).items()):
        colour = f"C{i % 10}"
        ok = sorted((r for r in runs if not r.overloaded), key=lambda r: r.load_jobs_per_h)
        loads = [r.load_jobs_per_h for r in ok]
        top.plot(
            loads,
            [r.mean_speedup for r in ok],
            marker="o",
            color=colour,
            label=label + _overload_note(runs),
        )
        waits_h = [r.mean_wait_s / 3600 for r in ok]
        bottom.plot(loads, [max(w, WAIT_FLOOR_H) for w in waits_h], color=colour)
        high = [(x, w) for x, w in zip(loads, waits_h, strict=True) if w >= WAIT_FLOOR_H]
        low = [x for x, w in zip(loads, waits_h, strict=True) if w < WAIT_FLOOR_H]
        bottom.plot([x for x, _ in high], [w for _, w in high], "o", color=colour)
        bottom.plot(low, [WAIT_FLOOR_H] * len(low), "v", color=colour, mfc="none")
        floored_any = floored_any or bool(low)
        drawn_any = drawn_any or bool(ok)
    top.set_ylabel("mean speedup")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    all_loads = [s.load_jobs_per_h for s in summaries]
    if len(set(all_loads)) > 1:
        # The whole swept range, overloaded loads included: where a curve stops shows.
        pad = 0.04 * (max(all_loads) - min(all_loads))
        bottom.set_xlim(min(all_loads) - pad, max(all_loads) + pad)
    bottom.set_yscale("log")
    if not drawn_any:  # every run overloaded: an empty log axis cannot autoscale
        bottom.set_ylim(WAIT_FLOOR_H / 2, 10)
    bottom.set_ylabel("mean waiting time [h]")
    bottom.set_xlabel("load [jobs/h]")
    bottom.grid(True, which="both", alpha=0.3)
    if floored_any:
        marker = Line2D([], [], ls="none", marker="v", mfc="none", color="0.3")
        note = f"below {WAIT_FLOOR_H * 3600:.1f} s (drawn at {WAIT_FLOOR_H:g} h)"
        bottom.legend([marker], [note], fontsize="small", loc="upper left")
    handles, labels = top.get_legend_handles_labels()
    if handles:
        # Below the panels, where it hides no curve; overloaded runs are named there.
        ncols = 2 if max(len(x) for x in labels) <= 44 else 1
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize="small")
    if not drawn_any:
        empty = "every run overloaded the cluster" if summaries else "no runs"
        top.text(0.5, 0.5, empty, ha="center", va="center", transform=top.transAxes)
    nodes = sorted({s.n_nodes for s in summaries})
    where = f", {'/'.join(str(n) for n in nodes)} nodes" if nodes else ""
    fig.suptitle(title or f"Mean speedup and waiting time against load{where}")
    return _save_png(fig, path)


def _save_png(fig: Figure, path: Path) -> Path:
    """``fig.savefig`` to a temporary name in ``path``'s directory, then an atomic rename
    (with the permissions the umask gives any new file)."""
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    return path
