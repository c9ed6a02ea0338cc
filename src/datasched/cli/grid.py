"""The command of ranganathan-foster's data grid: ``reproduce grid`` (the paper's 12 pairs of
external and dataset schedulers at two bandwidths, JobAdaptive beside them, with a report)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from datasched.cli.app import reproduce_app
from datasched.cli.common import (
    check_out_dir,
    cluster_errors,
    fail,
    keeping_runs,
    kept_runs,
    out,
    print_json,
    run_progress,
    user_errors,
    where_to_run,
)
from datasched.cli.options import (
    QUICK_TITLE,
    JsonOpt,
    ProcessesOpt,
    ReportDirOpt,
    ResumeOpt,
    SchedulerOpt,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
)

__all__: list[str] = []


@reproduce_app.command("grid")
def reproduce_grid(
    out_dir: ReportDirOpt,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            metavar="",
            help="One seed, 1,800 jobs, no sensitivity table (about 15 s).",
        ),
    ] = False,
    local: Annotated[
        str,
        typer.Option(
            "--local",
            metavar="NAME",
            help="Every site's local scheduler: fifo (the paper's, the default), data-ready "
            "(the first queued job whose data has landed), or a registered cluster policy, "
            "whose processors then have node caches (see docs/grid.md).",
        ),
    ] = "fifo",
    as_json: JsonOpt = False,
    resume: ResumeOpt = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
) -> None:
    """Re-run the experiments of ranganathan-foster (decoupling computation and data
    scheduling in data grids): 120 users, 30 sites, 200 datasets, 6,000 jobs; the 4 external
    x 3 dataset schedulers and JobAdaptive at 10 and 100 MB/s, 3 seeds each; and a
    sensitivity table over the settings the paper leaves open. Writes Figs. 3-5 (CSV and PNG),
    runs.csv, claims.csv and a report with the paper's statement beside ours for every claim.
    `--json` prints `{"claims": [{"key", "paper", "ours", "agrees", ...}], "report",
    "figures", "quick"}`. A `--quick` run says so at the top of its report and under its
    table. Each run's result is kept in DIR/runs/ as it finishes; interrupted (Ctrl-C,
    SIGTERM), the command keeps what finished, says so and exits with status 130; `--resume`
    goes on from there."""
    from dataclasses import asdict, replace

    from datasched.gridsim.model import GridError
    from datasched.studies.grid.reproduce import run_grid_study, write_grid
    from datasched.studies.grid.runs import BASE, FULL, QUICK
    from datasched.studies.report import quick_note

    check_out_dir(out_dir)
    try:
        replace(BASE, local=local).check()
    except GridError as exc:
        fail(f"--local: {exc.reason}")
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    study = replace(QUICK if quick else FULL, local=local)
    where = f"on {target}" if target else f"in {processes} processes"
    tag = {"study": "grid", "quick": quick, "sizes": asdict(study)}
    store = kept_runs(out_dir, tag, resume=resume)
    with keeping_runs(store), run_progress() as say, cluster_errors():
        say(f"running the reproduction {where} ...")
        outcome = run_grid_study(
            study, processes=processes, scheduler=target, progress=say, store=store
        )
    with user_errors():
        md_path, figs = write_grid(outcome, out_dir, quick=quick)
    if as_json:
        print_json(
            {
                "claims": [
                    {
                        "key": c.key,
                        "section": c.section,
                        "claim": c.claim,
                        "paper": c.paper,
                        "ours": c.ours,
                        "agrees": c.agrees,
                        "note": c.note,
                    }
                    for c in outcome.claims
                ],
                "report": str(md_path),
                "figures": [str(f.png_path) for f in figs],
                "quick": quick,
            }
        )
        return
    title = f"ranganathan-foster: paper vs datasched{QUICK_TITLE if quick else ''}"
    table = Table(title=title)
    for col in ("claim", "paper", "ours", "agrees"):
        table.add_column(col)
    for c in outcome.claims:
        agrees = "-" if c.agrees is None else ("yes" if c.agrees else Text("no", style="yellow"))
        table.add_row(c.key, str(c.paper), str(c.ours), agrees)
    out.print(table)
    if quick:
        out.print(quick_note("datasched reproduce grid", markdown=False), highlight=False)
    out.print(f"report: {md_path}", highlight=False)
    out.print(f"figures: {out_dir / 'figures'}", highlight=False)
