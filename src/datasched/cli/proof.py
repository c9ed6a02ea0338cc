"""The PROOF commands: ``reproduce proof`` (ganis et al.'s numbers and figures beside ours) and
``proof-sim`` (the uneven-data job under one packetizer, monitored packet by packet as PROOF
does: a table and plots)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from datasched.cli.app import app, reproduce_app
from datasched.cli.common import (
    check_out_dir,
    fail,
    keeping_runs,
    kept_runs,
    out,
    print_json,
    run_progress,
    user_errors,
)
from datasched.cli.options import (
    QUICK_TITLE,
    ParamOpt,
    ReportDirOpt,
    ResumeOpt,
    policy_params_of,
)
from datasched.cli.tables import claims_table

if TYPE_CHECKING:
    from datasched.studies.claims import Measured

__all__: list[str] = []

PROOF_INTRO = (
    "the simulator (one claim from a local Dask cluster), with what the paper gives of its\n"
    "clusters and the rest chosen once from the hardware of the time (docs/proof.md), nothing\n"
    "fitted; where the paper gives a figure and words, the claim says how they are read."
)

JsonFlag = Annotated[
    bool,
    typer.Option("--json", metavar="", help="Print one JSON object and nothing else on stdout."),
]


@reproduce_app.command("proof")
def reproduce_proof(
    out_dir: ReportDirOpt,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            metavar="",
            help="Half the data, a 4-hour day, a smaller local cluster, a 1-minute quota test.",
        ),
    ] = False,
    no_runtime: Annotated[
        bool,
        typer.Option(
            "--no-runtime",
            metavar="",
            help="Skip the uneven job and the quota test on a local Dask cluster (their "
            "claims: not measured).",
        ),
    ] = False,
    as_json: JsonFlag = False,
    resume: ResumeOpt = False,
) -> None:
    """Re-run the experiments of ganis et al. (PROOF) in the simulator: the uneven-data job
    under the basic and adaptive packetizers (§2.3, Figures 3-4) and a day of CPU quotas for
    four groups (§3.3, Figure 6); writes a report with the paper's value beside ours for every
    claim, and the figures as PNG and CSV. The uneven job also runs, scaled down, on a local
    Dask cluster (file servers as workers of no slot holding files in their caches), and so
    does the quota test (four groups' continuous analyses, shares from per-packet CPU time,
    10 minutes; 1 with `--quick`), unless `--no-runtime`. `--json` prints
    `{"claims": [{"key", "paper", "ours", "agrees"}, ...], "report", "quick"}` (ours null
    where not measured). A `--quick` run says so at the top of its report and under its
    table. While it runs, stderr shows each run as it finishes (under a status line on a
    terminal, a line each otherwise); each run's result is kept in DIR/runs/. Interrupted
    (Ctrl-C, SIGTERM), the command keeps what finished, says so and exits with status 130;
    `--resume` goes on from there."""
    from datasched.studies.proof.reproduce import run_proof, write_proof_figures
    from datasched.studies.report import quick_note, write_report

    check_out_dir(out_dir)
    tag = {"study": "proof", "quick": quick}
    store = kept_runs(out_dir, tag, resume=resume)
    runtime = None if no_runtime else _runtime_claims(quick, out_dir / "figures")
    with keeping_runs(store), run_progress() as say:
        results = run_proof(quick=quick, progress=say, runtime=runtime, store=store)
    with user_errors():
        figures = write_proof_figures(results, out_dir / "figures")
        if runtime is not None:
            quota_png = out_dir / "figures" / "quota_runtime.png"
            figures.append(("CPU quotas on a local Dask cluster, per-packet CPU time", quota_png))
        _, md_path = write_report(
            results.claims,
            out_dir,
            title="Reproduction of ganis et al. (PROOF): packetizers and resource scheduling",
            figures=figures,
            command="datasched reproduce proof",
            intro=PROOF_INTRO,
            quick=quick,
        )
    claims = results.claims
    if as_json:
        print_json(
            {
                "claims": [
                    {
                        "key": c.key,
                        "paper": c.paper,
                        "ours": c.ours if math.isfinite(c.ours) else None,
                        "agrees": c.agrees if math.isfinite(c.ours) else None,
                        "bound": c.bound,
                        "unit": c.unit,
                    }
                    for c in claims
                ],
                "report": str(md_path),
                "quick": quick,
            }
        )
        return
    title = f"ganis et al. (PROOF): paper vs datasched{QUICK_TITLE if quick else ''}"
    table = claims_table(title, claims, by_key=True)
    out.print(table)
    if quick:
        out.print(quick_note("datasched reproduce proof", markdown=False), highlight=False)
    out.print(f"report: {md_path}", highlight=False)
    out.print(f"figures: {out_dir / 'figures'}", highlight=False)


@app.command("proof-sim")
def proof_sim(
    report_dir: Annotated[
        Path,
        typer.Option(
            "--report",
            metavar="DIR",
            help="Where the packet table, the progress table and the plot go.",
        ),
    ],
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            "-p",
            metavar="NAME",
            help="The policy (PROOF's are basic-packetizer and adaptive-packetizer).",
        ),
    ] = "adaptive-packetizer",
    seed: Annotated[int, typer.Option("--seed", metavar="INT", help="Placement of the files.")] = 0,
    files: Annotated[
        int, typer.Option("--files", metavar="N", help="Files of 1 GB in the data set.")
    ] = 300,
    uniform: Annotated[
        bool,
        typer.Option(
            "--uniform", metavar="", help="Spread the files evenly over the workers' disks."
        ),
    ] = False,
    param: ParamOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Simulate the uneven-data job of ganis et al. §2.3 (16 workers, 18 file servers, files
    spread unevenly, disks shared by their readers) under one policy, and monitor it as
    PROOF does: every packet (worker, node, file, events, processing and CPU time, bytes,
    where its data lay) and the job's progress (events/s, MB/s, active workers), as tables
    and a plot in `--report`."""
    from datasched.sim.monitor import (
        CATEGORIES,
        category,
        plot_packets,
        progress,
        write_packets_csv,
        write_progress_csv,
    )
    from datasched.studies.proof.runs import run_uneven
    from datasched.studies.proof.setup import UnevenSetup

    check_out_dir(report_dir, "--report")
    if files < 1:
        fail("--files: must be at least 1")
    with user_errors():
        params = policy_params_of(policy, param)
        setup = replace(UnevenSetup(files=files), uniform=uniform)
        run = run_uneven(setup, policy, seed, params)
        workers = set(run.worker_nodes)
        packets_csv = write_packets_csv(report_dir / "packets.csv", run.packets, workers)
        progress_csv = write_progress_csv(
            report_dir / "progress.csv", progress(run.packets, 10.0, run.end_s)
        )
        png = plot_packets(
            [(policy, run.packets, run.end_s)],
            workers,
            setup.workers,
            report_dir / "packets.png",
            title=f"the uneven-data job, placement {seed}",
        )
    by_cat = dict.fromkeys(CATEGORIES, 0)
    for p in run.packets:
        by_cat[category(p, workers)] += p.events
    summary = {
        "policy": policy,
        "seed": seed,
        "processing_s": run.end_s,
        "bound_s": run.bound_s,
        "packets": len(run.packets),
        "tail_fraction": run.tail_fraction,
        "events_by_category": by_cat,
        "packets_csv": str(packets_csv),
        "progress_csv": str(progress_csv),
        "plot": str(png),
    }
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"{policy}: the uneven-data job, placement {seed}", show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("processing time", f"{run.end_s:,.0f} s (bound {run.bound_s:,.0f} s)")
    table.add_row("packets", str(len(run.packets)))
    table.add_row("time with < half the workers active", f"{run.tail_fraction:.1%}")
    total = sum(by_cat.values()) or 1
    for c, n in by_cat.items():
        table.add_row(f"events, {c}", f"{n:,} ({n / total:.0%})")
    out.print(table)
    out.print(f"packets: {packets_csv}\nprogress: {progress_csv}\nplot: {png}", highlight=False)


def _runtime_claims(quick: bool, figures: Path) -> dict[str, Callable[[], Measured]]:
    """The local-cluster measurements by claim key (compare/ may import the runtime; sim/
    may not): the uneven job, then the quotas (whose plot and CSV go into ``figures``)."""
    from datasched.studies.proof.runtime_quota import measure_quota_runtime
    from datasched.studies.proof.runtime_uneven import measure_runtime

    return {
        "adaptive_over_basic_time_runtime": partial(measure_runtime, quick),
        "quota_max_error_pp_runtime": partial(measure_quota_runtime, quick, figures),
    }
