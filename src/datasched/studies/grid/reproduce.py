"""The reproduction of ranganathan-foster (decoupling computation and data scheduling in data
grids): every run of the study (:mod:`datasched.studies.grid.runs`), the claims filled
(:mod:`datasched.studies.grid.claims`), the figures and the report written."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

from datasched._files import atomic_write_text
from datasched.gridsim.engine import GridResult, GridRun, run_grid
from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    DATA_LEAST_LOADED,
    JOB_DATA_PRESENT,
    JOB_LOCAL,
    grid_schedulers,
)
from datasched.sim.parallel import SchedulerRef
from datasched.studies.grid.claims import GridClaim, grid_claims
from datasched.studies.grid.figures import GridFigure, grid_figures, write_grid_figure
from datasched.studies.grid.runs import (
    BASE,
    EXTERNAL_SCHEDULERS,
    THRESHOLD,
    GridStudy,
    Summary,
    pairs_at,
    study_runs,
    summarise,
    variant_pairs,
)
from datasched.studies.report import quick_note
from datasched.studies.resume import RunStore, Unit, run_units

__all__ = ["GridOutcome", "grid_units", "run_grid_study", "write_grid"]

Progress = Callable[[str], None]


@dataclass
class GridOutcome:
    """Everything the reproduction measured."""

    study: GridStudy
    results: list[GridResult]
    summaries: list[Summary]
    claims: list[GridClaim]


def grid_units(study: GridStudy) -> tuple[list[GridRun], list[Unit]]:
    """Every run of ``study`` and its unit (:mod:`datasched.studies.resume`), which returns
    the run's measures as plain data."""
    runs = study_runs(study)
    units = [
        Unit(
            f"{r.label}/{r.cfg.bandwidth_mb_s:g}/{r.cfg.seed}/{r.external}/{r.dataset}"
            f"/{r.threshold}",
            f"{r.external} + {r.dataset}, {r.label}",
            partial(_measures, r),
        )
        for r in runs
    ]
    return runs, units


def _measures(run: GridRun) -> dict[str, Any]:
    result = run_grid(run)
    return {f.name: getattr(result, f.name) for f in fields(result) if f.name != "run"}


def run_grid_study(
    study: GridStudy,
    *,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    progress: Progress | None = None,
    store: RunStore | None = None,
) -> GridOutcome:
    """Run every simulation of ``study`` in ``processes`` processes (or on the Dask cluster
    at ``scheduler``) and fill the claims. ``progress`` gets a line as each finishes
    (``[k/N] external + dataset, label (seconds)``); with ``store``, each is kept as it
    finishes and those it already holds are read back."""
    runs, units = grid_units(study)
    done = run_units(units, processes=processes, scheduler=scheduler, store=store, say=progress)
    results = [GridResult(run, **measures) for run, measures in zip(runs, done, strict=True)]
    summaries = summarise(results)
    slow, fast = min(study.bandwidths_mb_s), max(study.bandwidths_mb_s)
    return GridOutcome(study, results, summaries, grid_claims(summaries, slow, fast))


def write_grid(
    outcome: GridOutcome, out_dir: Path, *, quick: bool = False
) -> tuple[Path, list[GridFigure]]:
    """Write the figures (CSV and PNG) under ``out_dir/figures``, and ``report.md``,
    ``claims.csv`` and ``runs.csv`` in ``out_dir``; returns the report's path and figures.
    ``quick``: the run was ``--quick``'s, which the report says first."""
    slow, fast = min(outcome.study.bandwidths_mb_s), max(outcome.study.bandwidths_mb_s)
    figs = [
        write_grid_figure(f, out_dir / "figures")
        for f in grid_figures(outcome.summaries, slow, fast)
    ]
    atomic_write_text(out_dir / "claims.csv", _csv([asdict(c) for c in outcome.claims]))
    atomic_write_text(out_dir / "runs.csv", _csv([_run_row(r) for r in outcome.results]))
    text = _report(outcome, figs, out_dir, slow, fast, quick=quick)
    md_path = out_dir / "report.md"
    atomic_write_text(md_path, text)
    return md_path, figs


def _csv(rows: list[dict[str, object]]) -> str:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def _run_row(r: GridResult) -> dict[str, object]:
    row: dict[str, object] = {
        "label": r.run.label,
        "bandwidth_mb_s": r.run.cfg.bandwidth_mb_s,
        "seed": r.run.cfg.seed,
        "external": r.run.external,
        "dataset": r.run.dataset,
        "threshold": r.run.threshold,
    }
    for name in ("mean_response_s", "mb_per_job", "fetch_mb_per_job", "replica_mb_per_job"):
        row[name] = round(getattr(r, name), 3)
    row.update(
        idle_pct=round(r.idle_pct, 3),
        makespan_s=round(r.makespan_s, 1),
        replicas=r.replicas,
        evictions=r.evictions,
        overflow_gb=round(r.overflow_gb, 3),
        lan_mb_per_job=round(r.lan_mb_per_job, 3),
    )
    return row


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return lines


def _agrees(c: GridClaim) -> str:
    return "-" if c.agrees is None else ("yes" if c.agrees else "**no**")


def _report(
    outcome: GridOutcome,
    figs: list[GridFigure],
    out_dir: Path,
    slow: float,
    fast: float,
    *,
    quick: bool = False,
) -> str:
    study = outcome.study
    claims = outcome.claims
    judged = [c for c in claims if c.agrees is not None]
    lines = [
        "# Reproduction of ranganathan-foster (decoupling computation and data scheduling)",
        "",
        *([quick_note("datasched reproduce grid"), ""] if quick else []),
        f"Generated by `datasched reproduce grid{' --quick' if quick else ''}"
        f"{'' if study.local == BASE.local else ' --local ' + study.local}`: "
        f"the grid simulator (`datasched.gridsim.engine`), {len(study.seeds)} seed(s) per point, "
        f"{study.jobs:,} jobs per run. Paper values are read off its text (its figures give no "
        "numbers); the settings it leaves open are ours, below, chosen once and varied in the "
        "sensitivity table.",
        "",
        *_table(
            ("claim", "key", "section", "paper", "ours", "agrees", "note"),
            [
                (c.claim, f"`{c.key}`", c.section, c.paper, c.ours, _agrees(c), c.note)
                for c in claims
            ],
        ),
        "",
        f"{sum(bool(c.agrees) for c in judged)} of {len(judged)} claims of the paper agree; "
        f"{len(claims) - len(judged)} are ours beyond it (JobAdaptive).",
        "",
        "## The grid",
        "",
        *_table(("setting", "value", "source"), _settings(study)),
        "",
    ]
    for bw in (slow, fast):
        at = pairs_at(outcome.summaries, bw)
        lines += [
            f"## Every pair at {bw:g} MB/s (mean of {len(study.seeds)} seed(s))",
            "",
            *_table(
                ("external", "dataset", "response (s)", "MB/job", "idle (%)", "replicas"),
                [
                    (
                        e,
                        d,
                        f"{s.response_s:,.0f}",
                        f"{s.mb_per_job:,.0f}",
                        f"{s.idle_pct:.1f}",
                        f"{s.replicas:,.0f}",
                    )
                    for (e, d), s in at.items()
                ],
            ),
            "",
        ]
    variants = variant_pairs(outcome.summaries)
    if variants:
        lines += [
            f"## Sensitivity ({slow:g} MB/s, seed {study.seeds[0]}, one setting changed at a time)",
            "",
            *_table(
                (
                    "variant",
                    "best ES, no replication",
                    "worst ES, no replication",
                    "JobLocal, none (s)",
                    "JobDataPresent, none (s)",
                    "JobDataPresent + DataLeastLoaded (s)",
                    "DP + DLL over best without",
                ),
                [_variant_row(label, pairs) for label, pairs in variants],
            ),
            "",
            _discussion(variants),
            "",
        ]
    lines += _notes()
    lines += ["## Figures", ""]
    for f in figs:
        if f.png_path is not None:
            rel = f.png_path.relative_to(out_dir)
            lines += [f"### {f.title}", "", f"![{f.title}]({rel})", ""]
    return "\n".join(lines) + "\n"


def _discussion(variants: Sequence[tuple[str, dict[tuple[str, str], Summary]]]) -> str:
    """Where the paper's ranking without replication appears in the sensitivity table."""
    worst_dp, best_local, repl_wins = [], [], []
    for label, pairs in variants:
        none = {e: pairs[e, DATA_DO_NOTHING].response_s for e in EXTERNAL_SCHEDULERS}
        if max(none, key=none.__getitem__) == JOB_DATA_PRESENT:
            worst_dp.append(label)
        if min(none, key=none.__getitem__) == JOB_LOCAL:
            best_local.append(label)
        if pairs[JOB_DATA_PRESENT, DATA_LEAST_LOADED].response_s < min(none.values()):
            repl_wins.append(label)
    return (
        "Without replication the ranking turns on how dear a fetch is against how hot the "
        "hottest sites get. JobDataPresent is the worst, as in the paper, in: "
        + (", ".join(worst_dp) or "none of the rows")
        + ". JobLocal is the best, as in the paper, in: "
        + (", ".join(best_local) or "none of the rows")
        + ". Where fetches are dear (small caches, links shared by many transfers through "
        "tier 0 at 10 MB/s) every fetching scheduler leaves processors idle waiting for data "
        "and keeping jobs at the data wins even with hot spots. JobDataPresent with "
        "replication beats every scheduler without it in: "
        + (", ".join(repl_wins) or "none of the rows")
        + "."
    )


def _variant_row(label: str, pairs: dict[tuple[str, str], Summary]) -> list[object]:
    none = {e: pairs[e, DATA_DO_NOTHING].response_s for e in EXTERNAL_SCHEDULERS}
    best = min(none, key=none.__getitem__)
    dp = pairs[JOB_DATA_PRESENT, DATA_LEAST_LOADED].response_s
    return [
        label,
        best,
        max(none, key=none.__getitem__),
        f"{none[JOB_LOCAL]:,.0f}",
        f"{none[JOB_DATA_PRESENT]:,.0f}",
        f"{dp:,.0f}",
        f"{dp / none[best]:.2f}",
    ]


def _settings(study: GridStudy) -> list[tuple[str, str, str]]:
    paper = {
        "users": "Table 1",
        "sites": "Table 1",
        "datasets": "Table 1",
        "jobs": "Table 1",
        "bandwidth_mb_s": "Table 1 (10 and 100)",
        "procs": 'Table 1 ("2-5")',
        "size_mb": "§5.1",
        "compute_s_per_gb": "§5.1 (300·D s)",
        "local": "§4 (FIFO)",
        "local_params": "ours (with a cluster policy at the sites)",
        "node_cache_gb": "ours (with a cluster policy at the sites)",
        "lan_mb_s": "ours (with a cluster policy at the sites)",
        "events_per_gb": "ours (with a cluster policy at the sites)",
    }
    rows = []
    for f in fields(BASE):
        value = getattr(BASE, f.name)
        if f.name == "jobs":
            value = study.jobs
        if f.name == "bandwidth_mb_s":
            value = ", ".join(f"{b:g}" for b in study.bandwidths_mb_s)
        if f.name == "seed":
            value = ", ".join(map(str, study.seeds))
        if f.name == "local":
            value = study.local
        rows.append((f.name, str(value), paper.get(f.name, "ours")))
    rows.append(("threshold", str(THRESHOLD), 'ours (paper: "a threshold")'))
    neighbours = {
        name: next((p.default for p in cls.params if p.name == "neighbours"), None)
        for name, cls in grid_schedulers().items()
    }
    rows.append(
        (
            "neighbours",
            ", ".join(f"{n}: {v or 'every site'}" for n, v in neighbours.items() if v is not None),
            'ours (DataRandom: "a random site on the grid")',
        )
    )
    return rows


def _notes() -> list[str]:
    return [
        "## How the model reads the paper",
        "",
        "* Topology: a tree, site 0 at tier 0, `tier1` sites under it, the others spread "
        "evenly under those (GriPhyN's tiers); every link has the scenario's bandwidth and is "
        "shared equally by the transfers crossing it, rates recomputed when a transfer on it "
        "starts or ends (§5.1's contention model as a fluid). A transfer runs at its least "
        "share along its path.",
        "* A job's dataset is fetched from the nearest replica (fewest hops, then the least "
        "busy path) when the job joins its site's queue; the job computes once it has landed. "
        "The local scheduler is FIFO (§4): the head of the queue holds the processors behind "
        "it while its data is on the way, which is the idle time of Fig. 4.",
        "* Storage: each site keeps its initial replicas and has `cache_gb` for fetched and "
        "replicated datasets, evicted LRU; a dataset a queued or running job needs is not "
        "evicted (a site may then hold more than `cache_gb`; `overflow_gb` in `runs.csv`).",
        "* Popularity: each site's dataset scheduler counts the jobs that started there on "
        "each dataset; when a count passes the threshold, the dataset is replicated (DataRandom: "
        "to a random site not holding it; DataLeastLoaded: to the neighbour with the fewest "
        "waiting jobs) and the count starts again.",
        "* Users draw each job's dataset by its rank in the community's ranking, the rank "
        "geometric (p = `popularity_p`), so the community focuses on the same datasets (Fig. 2).",
        "* Response time is completion minus submission (max(queue, transfer) + compute, as "
        "§5.2 defines it); data moved per job counts fetches and replications; idle time is "
        "the share of processor time not computing, up to the last completion.",
        "* JobAdaptive (§6): per job, the least expected time to start of the least loaded "
        "site holding the data, and of the user's site and the least loaded site with a fetch "
        "at the links' current shares; ties go to the data's site.",
        "* The local scheduler can also be `data-ready` (a free processor takes the first "
        "queued job whose data has landed; the processors have no caches), or any registered "
        "cluster policy (`--local`): the site's processors are then that policy's nodes, each "
        "with a cache of `node_cache_gb`; a job joins the site's core queue once its data has "
        "landed, and what a processor's cache lacks is read from the site's storage at "
        "`lan_mb_s` before computing (docs/grid.md).",
        "",
    ]
