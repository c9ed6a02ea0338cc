"""The reproduction of romosan (co-scheduling data movement with computation): every
experiment run (:mod:`datasched.studies.romosan.runs`), the claims filled
(:mod:`datasched.studies.romosan.claims`), the figures and the report written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

from datasched.sim.parallel import SchedulerRef
from datasched.studies.claims import Claim, fill_claims
from datasched.studies.report import write_report
from datasched.studies.resume import MISSING, RunStore, Unit, run_units
from datasched.studies.romosan.claims import ROMOSAN_CLAIMS, measure_romosan
from datasched.studies.romosan.figures import RomosanFigure, romosan_figures, write_romosan_figure
from datasched.studies.romosan.runs import (
    CLUSTER,
    LP,
    POLICIES,
    CoschedRun,
    EdgePoint,
    RomosanCluster,
    RomosanStudy,
    RunResult,
    edge_point,
    run_one,
    study_runs,
)

__all__ = ["RomosanOutcome", "romosan_units", "run_romosan", "write_romosan"]

Progress = Callable[[str], None]


@dataclass
class RomosanOutcome:
    """Everything the reproduction measured."""

    study: RomosanStudy
    cluster: RomosanCluster
    results: list[RunResult]
    edges: list[EdgePoint]
    claims: list[Claim]


def romosan_units(
    study: RomosanStudy, cluster: RomosanCluster = CLUSTER
) -> tuple[list[Unit], list[Unit]]:
    """The reproduction's runs: the simulations (which may share the machine; in the order
    of :func:`~datasched.studies.romosan.runs.study_runs`) and the timed batches of the
    edges experiment (run alone). Each returns plain data (:func:`run_units` keeps it)."""
    runs = [
        Unit(
            f"{r.experiment}/{r.policy}/{r.servers}/{r.cache_gb:g}/{r.lp_period_s:g}",
            f"{r.experiment}: {r.policy}, {r.servers} servers",
            partial(_simulated, r),
            # Longest first (10,000-job runs of the min-cost flow): the processes end together.
            cost=r.jobs + (0.5 if r.policy == LP else 0.0),
        )
        for r in study_runs(study, cluster)
    ]
    edges = [
        Unit(
            f"edges/{n}",
            f"one batch of the min-cost flow at {n:,} files x {study.edge_servers} servers",
            partial(_timed_batch, n, study, cluster),
        )
        for n in study.edge_files
    ]
    return runs, edges


def _simulated(run: CoschedRun) -> dict[str, Any]:
    return asdict(run_one(run))


def _timed_batch(n: int, study: RomosanStudy, cluster: RomosanCluster) -> dict[str, Any]:
    return asdict(edge_point(n, study, cluster))


def run_romosan(
    study: RomosanStudy,
    *,
    cluster: RomosanCluster = CLUSTER,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    progress: Progress | None = None,
    store: RunStore | None = None,
) -> RomosanOutcome:
    """Run every experiment of ``study``: the simulations in ``processes`` processes (or on
    the Dask cluster at ``scheduler``), then the timed batches of the edges experiment here,
    alone, with nothing else sharing the CPU.

    ``progress`` gets a line as each step starts (what runs where) and as each run finishes,
    ``[k/N] experiment: policy, servers (seconds)``, as ``reproduce ponce``'s runs do (the
    command scrolls those under its status line on a terminal, and prints every line
    otherwise). With ``store``, each run is kept as it finishes and the runs it already
    holds are read back (:mod:`datasched.studies.resume`)."""
    say = progress or (lambda _: None)
    sims, batches = romosan_units(study, cluster)
    where = f"on {scheduler}" if scheduler is not None else f"in {processes} processes"
    say(f"{len(sims)} simulations {where}, then {len(batches)} timed batches alone")
    done = run_units(sims, processes=processes, scheduler=scheduler, store=store, say=say)
    results = [RunResult(**r) for r in done]
    if store is None or any(store.get(u.key) is MISSING for u in batches):
        edge_point(
            64, replace(study, edge_jobs=64, edge_servers=4), cluster
        )  # imports, first calls
    edges = [EdgePoint(**e) for e in run_units(batches, store=store, say=say)]
    claims = fill_claims(ROMOSAN_CLAIMS, measure_romosan(results, edges, study))
    return RomosanOutcome(study, cluster, results, edges, claims)


def write_romosan(
    outcome: RomosanOutcome, out_dir: Path, *, quick: bool = False
) -> tuple[Path, list[RomosanFigure]]:
    """Write the figures (CSV and PNG) under ``out_dir/figures`` and ``report.md`` and
    ``claims.csv`` in ``out_dir``; returns the report's path and the figures. ``quick``:
    the run was ``--quick``'s, which the report says first."""
    figs = [
        write_romosan_figure(f, out_dir / "figures")
        for f in romosan_figures(outcome.results, outcome.edges)
    ]
    shown = [(f.title, f.png_path) for f in figs if f.png_path is not None]
    _, md_path = write_report(
        outcome.claims,
        out_dir,
        title="Reproduction of romosan (co-scheduling data movement with computation)",
        figures=shown,
        command="datasched reproduce romosan",
        intro="the simulator with the cluster below (the paper gives only its 20 GB caches).",
        sections=_sections(outcome),
        quick=quick,
    )
    return md_path, figs


def _table(rows: Sequence[tuple[str, str]], head: tuple[str, str]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "| --- | --- |"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def _sections(outcome: RomosanOutcome) -> list[str]:
    study = outcome.study
    sizes = [(f.name, _value(getattr(study, f.name))) for f in fields(study)]
    zipf = [r for r in outcome.results if r.experiment == "zipf"]
    zipf_note = ""
    if zipf:
        small = min(r.cache_gb for r in zipf)
        remote = {
            (r.policy, r.cache_gb == small): r.remote_copies
            for r in zipf
            if r.servers == max(study.servers)
        }
        zipf_note = (
            "The paper shows the Zipf experiment's figures without a conclusion in words; "
            f"ours are below. On {max(study.servers)} servers the small cache makes "
            + ", ".join(
                f"{p} {remote.get((p, True), 0)} remote copies (infinite: "
                f"{remote.get((p, False), 0)})"
                for p in POLICIES
            )
            + "."
        )
    return [
        "## The cluster\n\nThe paper gives no cluster parameters beyond 20 GB of disk cache per "
        "node; these are ours (`datasched.studies.romosan.runs.RomosanCluster`, the one place "
        "they are set).\n\n" + _table(outcome.cluster.describe(), ("parameter", "value")),
        "## The experiments' sizes\n\n" + _table(sizes, ("setting", "value")),
        "## Notes\n\n"
        "Policies: FIFO is `fifo-roundrobin`, SJF `sjf-data`, LP `mincostflow` (a min-cost "
        "flow on the paper's network, the same optimum as its linear program). Transfers in "
        "flight are known to every policy: a job never fetches a file already on its way to "
        "its server, and a file on its way to another server is copied from there once it "
        "has landed. Scheduler time is the wall-clock time spent in the scheduler, measured "
        "while other simulations share the machine: compare it within a figure, not across "
        "machines.\n\n" + zipf_note,
    ]


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
