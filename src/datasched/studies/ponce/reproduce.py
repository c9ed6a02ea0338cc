"""Reproduction checks: the paper's numbers beside ours.

Each :class:`Claim` is one quantitative statement of ponce-hersch with the value the paper
gives, the value our simulator gives with the paper's parameters (§2.4), and, where they
differ by more than the tolerance, what we found explains it. Nothing is fitted: every run
uses the defaults of :class:`~datasched.sim.experiment.SimConfig`.

The work is split: :mod:`~datasched.studies.ponce.claims` holds the claims as data (wording,
the paper's values, tolerances, notes), :mod:`~datasched.studies.ponce.runs` measures our
numbers, :mod:`~datasched.studies.report` writes them; this module runs the whole and keeps the
names other modules import from it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from datasched.sim.parallel import SchedulerRef
from datasched.studies.claims import Claim, fill_claims
from datasched.studies.ponce.claims import PONCE_FCFS_CLAIMS, PONCE_POLICY_CLAIMS
from datasched.studies.ponce.figures import SEARCH_RUNS, FigureResult, Unit, cost_of
from datasched.studies.ponce.runs import (
    MAX_LOAD_POLICIES,
    Progress,
    fcfs_measured,
    fcfs_units,
    max_load_probe,
    measure_fcfs,
    measure_policies,
    policy_max_load,
)
from datasched.studies.report import write_report
from datasched.studies.resume import RunStore, run_units

__all__ = [
    "Claim",
    "policy_max_load",
    "ponce_fcfs_claims",
    "ponce_policy_claims",
    "ponce_units",
    "run_ponce",
    "write_report",
]


def ponce_fcfs_claims(*, quick: bool = False, progress: Progress | None = None) -> list[Claim]:
    """Claims of ponce-hersch §3.4 and §7.1 about the FCFS policies.

    ``quick`` uses fewer jobs per run (statistics get noisier, the cache-oriented runs see a
    shorter warm-up).
    """
    return fill_claims(PONCE_FCFS_CLAIMS, measure_fcfs(quick=quick, progress=progress))


def ponce_policy_claims(
    figs: dict[str, Any],
    *,
    quick: bool = False,
    progress: Progress | None = None,
    max_loads: dict[str, float] | None = None,
) -> list[Claim]:
    """Claims of ponce-hersch §4-§7 (out-of-order, replication, delayed and adaptive delay,
    pipelining), read from the figures' runs plus a few maximal-load searches (taken from
    ``max_loads``, policy -> jobs/h, where it has them)."""
    measured = measure_policies(figs, quick=quick, progress=progress, max_loads=max_loads)
    return fill_claims(PONCE_POLICY_CLAIMS, measured)


def ponce_units(*, quick: bool = False) -> tuple[list[Unit], list[Unit]]:
    """The reproduction's runs: those that may share the machine (the claims of §3 and §7,
    the figures' points, the maximal-load searches of §4-§6) and those timed alone (the
    master's load, Figure 16)."""
    from datasched.studies.ponce.figures import figure_specs, figure_units

    specs = figure_specs(quick=quick)
    shared = fcfs_units(quick=quick)
    timed: list[Unit] = []
    for spec in specs:
        (timed if spec.kind == "scale" else shared).extend(figure_units(spec))
    shared += [
        Unit(
            f"max-load/{p}",
            f"maximal load of {p}",
            partial(policy_max_load, p, quick=quick),
            cost_of(max_load_probe(p, quick=quick), runs=SEARCH_RUNS),
        )
        for p in MAX_LOAD_POLICIES
    ]
    return shared, timed


def run_ponce(
    *,
    quick: bool = False,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    progress: Progress | None = None,
    store: RunStore | None = None,
) -> tuple[list[Claim], list[FigureResult]]:
    """Every experiment of the reproduction: the claims and the figures (in the paper's
    order, not yet written).

    The runs (:func:`ponce_units`) run in up to ``processes`` processes, or with
    ``scheduler`` (a Dask scheduler's address) on that cluster's workers, the largest
    first; ``progress`` gets a line as each finishes. The §8 scale figure times the
    scheduler, so its runs go alone afterwards, here, with nothing else sharing the CPU.
    With ``store``, each run is kept as it finishes and runs it already holds are read back
    (:mod:`datasched.studies.resume`). The results do not depend on the number of
    processes, the order of the runs, or which were read back.
    """
    from datasched.studies.ponce.figures import assemble_figure, figure_specs, figure_units

    say = progress or (lambda _: None)
    shared, timed = ponce_units(quick=quick)
    where = f"on the Dask cluster at {scheduler}" if scheduler else f"in {processes} processes"
    say(f"{len(shared)} runs {where}, then {len(timed)} timed alone")
    out = run_units(shared, processes=processes, scheduler=scheduler, store=store, say=say)
    out += run_units(timed, store=store, say=say)
    by_key = dict(zip((u.key for u in [*shared, *timed]), out, strict=True))
    fcfs = fcfs_units(quick=quick)
    claims = fill_claims(
        PONCE_FCFS_CLAIMS, fcfs_measured([by_key[u.key] for u in fcfs], quick=quick)
    )
    results: dict[str, FigureResult] = {}
    specs = figure_specs(quick=quick)
    for spec in specs:
        results[spec.key] = assemble_figure(spec, [by_key[u.key] for u in figure_units(spec)])
    max_loads = {p: by_key[f"max-load/{p}"] for p in MAX_LOAD_POLICIES}
    claims += ponce_policy_claims(results, quick=quick, progress=say, max_loads=max_loads)
    return claims, [results[spec.key] for spec in specs]
