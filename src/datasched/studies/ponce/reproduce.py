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

from collections.abc import Callable
from functools import partial
from typing import Any

from datasched.sim.parallel import SchedulerRef, map_in_processes
from datasched.studies.claims import Claim, fill_claims
from datasched.studies.ponce.claims import PONCE_FCFS_CLAIMS, PONCE_POLICY_CLAIMS
from datasched.studies.ponce.figures import FigureResult
from datasched.studies.ponce.runs import (
    MAX_LOAD_POLICIES,
    Progress,
    measure_fcfs,
    measure_policies,
    policy_max_load,
)
from datasched.studies.report import write_report

__all__ = [
    "Claim",
    "policy_max_load",
    "ponce_fcfs_claims",
    "ponce_policy_claims",
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


def _call(part: Callable[[], Any]) -> Any:
    """Run one part of the reproduction (in a worker process)."""
    return part()


def run_ponce(
    *,
    quick: bool = False,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    progress: Progress | None = None,
) -> tuple[list[Claim], list[FigureResult]]:
    """Every experiment of the reproduction: the claims and the figures (in the paper's
    order, not yet written).

    With ``processes`` > 1 the independent parts (the claims of §3 and §7, the figures, the
    maximal-load searches of §4-§6) run in that many processes; with ``scheduler`` (a Dask
    scheduler's address) they run on that cluster's workers instead. The §8 scale figure
    times the scheduler, so it runs alone afterwards, here, with nothing else sharing the CPU.
    """
    from datasched.studies.ponce.figures import figure_specs, run_figure

    say = progress or (lambda _: None)
    specs = figure_specs(quick=quick)
    timed = [s for s in specs if s.kind == "scale"]
    results: dict[str, FigureResult] = {}
    max_loads: dict[str, float] = {}
    if processes <= 1 and scheduler is None:
        claims = ponce_fcfs_claims(quick=quick, progress=say)
        for spec in specs:
            if spec not in timed:
                results[spec.key] = run_figure(spec, quick=quick, progress=say)
    else:
        figures = [s for s in specs if s not in timed]
        parts: list[tuple[str, Callable[[], Any]]] = [
            ("claims of §3 and §7", partial(ponce_fcfs_claims, quick=quick))
        ]
        parts += [(s.key, partial(run_figure, s, quick=quick)) for s in figures]
        parts += [
            (f"maximal load of {p}", partial(policy_max_load, p, quick=quick))
            for p in MAX_LOAD_POLICIES
        ]
        where = f"on the Dask cluster at {scheduler}" if scheduler else f"in {processes} processes"
        say(f"running {len(parts)} parts {where} ...")
        finished = 0

        def done(i: int, _: object) -> None:
            nonlocal finished
            finished += 1
            say(f"{finished} of {len(parts)} parts done: {parts[i][0]}")

        out = map_in_processes(
            _call, [f for _, f in parts], processes=processes, scheduler=scheduler, on_done=done
        )
        claims = out[0]
        results.update(zip((s.key for s in figures), out[1 : 1 + len(figures)], strict=True))
        max_loads.update(zip(MAX_LOAD_POLICIES, out[1 + len(figures) :], strict=True))
    for spec in timed:
        results[spec.key] = run_figure(spec, quick=quick, progress=say)
    claims += ponce_policy_claims(results, quick=quick, progress=say, max_loads=max_loads)
    return claims, [results[spec.key] for spec in specs]
