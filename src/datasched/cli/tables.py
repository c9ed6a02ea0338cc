"""Tables the commands print: one run's figures, many runs, a maximal-load search."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from datasched.cli.common import hours, percent, size
from datasched.sim.experiment import MaxLoadSearch
from datasched.sim.metrics import Summary
from datasched.studies.claims import Claim
from datasched.studies.ponce.plots import uses_cache

__all__ = ["claims_table", "max_load_table", "summary_detail", "summary_table"]


NOT_MEASURED = "not measured"
"""What a table shows for a figure with nothing to measure (NaN; null in ``--json``)."""


def _measured(value: float, show: Callable[[float], str], missing: str = NOT_MEASURED) -> str:
    """``show(value)``, or ``missing`` where there was nothing to measure (NaN)."""
    return missing if math.isnan(value) else show(value)


def summary_detail(s: Summary) -> Table:
    """One run, one figure per row, in the units an operator reads (fits 80 columns); a
    figure with nothing to measure (a run stopped before its measured jobs ended) shows
    "not measured"."""
    pipe = "no pipelining" if s.pipeline == "none" else f"{s.pipeline} pipelining"
    title = (
        f"{s.policy} at {s.load_jobs_per_h:.3g} jobs/h: {s.n_nodes} nodes, "
        f"{s.cache_gb:g} GB cache each, {pipe}"
    )
    if s.n_slots not in (0, s.n_nodes):
        title += f", {s.n_slots // max(s.n_nodes, 1)} slots a node"
    if s.file_gb:
        title += f", {s.file_gb:g} GB files"
    if s.partial:
        bound = {"until": "--until", "max_jobs": "--max-jobs"}.get(s.stopped_by, "interrupt")
        title = f"PARTIAL (stopped by {bound}): {title}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    rows: list[tuple[str | Text, str | Text, str]] = []
    if s.partial:
        rows.append(
            (
                Text("partial run", style="yellow"),
                f"{s.end_s / 3600:.1f} h",
                f"stopped by {bound}: {s.jobs_completed + s.jobs_failed} jobs ended; "
                "waits and speedups of the measured jobs ended by then, utilization and "
                "reads with the work under way up to the stop",
            )
        )
    rows += [
        ("jobs measured", f"{s.jobs_measured}", "warm-up and cool-down left out"),
        ("mean wait", _measured(s.mean_wait_s, hours), "submission to start of first part"),
    ]
    if not math.isnan(s.mean_wait_excl_delay_s) and not math.isclose(
        s.mean_wait_excl_delay_s, s.mean_wait_s, rel_tol=1e-9, abs_tol=1e-6
    ):
        rows.append(
            (
                "mean wait after period",
                hours(s.mean_wait_excl_delay_s),
                "from the end of its period",
            )
        )
    rows += [
        ("median wait", _measured(s.median_wait_s, hours), ""),
        ("95th percentile wait", _measured(s.p95_wait_s, hours), ""),
        ("longest wait", _measured(s.max_wait_s, hours), ""),
        (
            "mean processing time",
            _measured(s.mean_processing_s, hours),
            "start of first part to end of last",
        ),
        (
            "mean speedup",
            _measured(s.mean_speedup, "{:.2f}".format),
            "alone on one node, no cache = 1",
        ),
        (
            "cache hits",
            _measured(s.cache_hit_ratio, percent),
            "events read from the node's cache",
        ),
        (
            "peer reads",
            _measured(s.peer_read_ratio, percent),
            "events read from another node's cache",
        ),
        (
            "tertiary reads",
            _measured(s.tertiary_bytes, size),
            "from central storage, measured jobs",
        ),
        ("utilization", _measured(s.utilization, percent), "slot time spent processing"),
        (
            "mean backlog",
            _measured(s.mean_backlog, "{:.1f} jobs".format),
            "in the system, seen at arrivals",
        ),
        (
            "overloaded",
            Text("yes", style="red") if s.overloaded else "no",
            "queues growing without end",
        ),
    ]
    if s.node_failures:
        rows += [
            ("node failures", f"{s.node_failures}", "their work given back, done elsewhere"),
            (
                "jobs completed",
                f"{s.jobs_completed} of {s.jobs_completed + s.jobs_failed}",
                f"{s.events_processed:,} of {s.events_submitted:,} events",
            ),
        ]
    for row in rows:
        table.add_row(*row)
    return table


def summary_table(rows: Sequence[Summary], title: str = "") -> Table:
    """Many runs, one row each (fits an 80-column terminal: the pipeline column shows only
    when some run pipelines); a figure with nothing to measure shows "-", which the caption
    then explains."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    piped = any(s.pipeline != "none" for s in rows)
    columns = ["policy", "cache", *(["pipeline"] if piped else []), "jobs/h", "speedup"]
    columns += ["wait", "p95 wait", "hits", "busy", "over"]
    for name in columns:
        table.add_column(name, justify="left" if name == "policy" else "right")
    for s in rows:
        cache = f"{s.cache_gb:g} GB" if uses_cache(s.policy) else "-"
        cells: list[str | Text] = [s.policy, cache, *([s.pipeline] if piped else [])]
        load = s.load_jobs_per_h
        cells += [
            f"{load:.2f}" if load >= 0.1 else f"{load:.3g}",
            _measured(s.mean_speedup, "{:.2f}".format, "-"),
            hours(s.mean_wait_s),
            hours(s.p95_wait_s),
            _measured(s.cache_hit_ratio, "{:.0%}".format, "-"),
            _measured(s.utilization, "{:.0%}".format, "-"),
            Text("yes", style="red") if s.overloaded else "no",
        ]
        table.add_row(*cells)
    figures = ("mean_speedup", "mean_wait_s", "p95_wait_s", "cache_hit_ratio", "utilization")
    if any(math.isnan(getattr(s, name)) for s in rows for name in figures):
        table.caption = "-: not measured (no measured job ended, or none read anything)"
    return table


def max_load_table(found: MaxLoadSearch, policy: str, where: str) -> Table:
    """The answer of a maximal-load search and the bracket around it."""

    def load(value: float | None) -> str:
        return "none found" if value is None else f"{value:.3f} jobs/h"

    confirmed = (
        f"confirmed by a run of {found.confirm_jobs} jobs"
        if found.confirm_jobs > found.n_jobs
        else "unconfirmed"
    )
    table = Table(
        title=f"maximal sustainable load of {policy} ({where})",
        box=box.SIMPLE_HEAD,
        show_header=False,
        pad_edge=False,
    )
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    table.add_row(
        "maximal sustainable load", load(found.max_load_jobs_per_h), "the highest sustained"
    )
    table.add_row("highest sustained", load(found.highest_sustained_jobs_per_h), confirmed)
    table.add_row(
        "lowest overloaded", load(found.lowest_overloaded_jobs_per_h), "the limit lies below"
    )
    table.add_row("runs", f"{len(found.probes)}", f"of {found.n_jobs} jobs and longer")
    return table


def claims_table(title: str, claims: Sequence[Claim], *, by_key: bool = False) -> Table:
    """A reproduction's claims, the paper's value beside ours, each cell as the report
    writes it (:func:`datasched.studies.report.claim_cells`); a claim is named by its text,
    or by its key (``by_key``) where the texts are long."""
    from datasched.studies.report import claim_cells

    table = Table(title=title)
    for col in ("claim", "paper", "ours", "agrees"):
        table.add_column(col)
    for c in claims:
        paper, ours, agrees = claim_cells(c)
        verdict: str | Text = Text(agrees, style="yellow") if agrees == "no" else agrees
        table.add_row(c.key if by_key else c.claim, paper, ours, verdict)
    return table
