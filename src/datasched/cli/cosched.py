"""Commands of romosan's co-scheduling: ``cosched solve`` (one assignment batch of the paper's
min-cost flow, from JSON) and ``reproduce romosan`` (the paper's experiments, with a report)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from datasched.cli.app import app, reproduce_app
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
from datasched.cli.tables import claims_table
from datasched.policies.cosched.mincostflow import (
    NETWORKS,
    InstanceError,
    parse_instance,
    solve_instance,
)

__all__: list[str] = []

cosched_app = typer.Typer(
    help="Co-scheduling of data movement with computation (romosan): the solver on its own.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(cosched_app, name="cosched")


@cosched_app.command("solve")
def cosched_solve(
    instance: Annotated[
        Path,
        typer.Argument(
            metavar="INSTANCE.json",
            help="The batch: local_cost, remote_cost, files (id, popularity, holders), "
            "servers (id, free_slots).",
            show_default=False,
        ),
    ],
    network: Annotated[
        str,
        typer.Option(
            "--network",
            metavar="NAME",
            help="grouped (servers by free-slot count; the same optimum) or full (the "
            "paper's: every file to every server).",
        ),
    ] = "grouped",
    as_json: JsonOpt = False,
) -> None:
    """Solve one assignment batch of romosan's file-to-server network: as many jobs as can
    start (min(queued jobs, free slots)), placed at the least cost of the paper's linear
    objective, sum of flow(e) / capacity(e) x C(e), with C = 0 on a server holding the file,
    l where another server holds it, r where none does. `--json` prints
    `{"total_flow", "objective", "flow": [[file_id, server_id, units], ...]}`."""
    if network not in NETWORKS:
        fail(f"--network: must be one of {', '.join(NETWORKS)}, got {network!r}")
    with user_errors():
        text = instance.read_text()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{instance}: not JSON: {exc.msg} (line {exc.lineno})")
    try:
        parsed = parse_instance(doc)
    except InstanceError as exc:
        fail(f"{exc.field}: {exc.reason}")
    result = solve_instance(parsed, "full" if network == "full" else "grouped")
    if as_json:
        print_json(result)
        return
    table = Table(title=f"{instance.name}: jobs placed", box=box.SIMPLE_HEAD)
    for col in ("file", "server", "jobs"):
        table.add_column(col, justify="right")
    for f, s, units in result["flow"]:
        table.add_row(str(f), str(s), str(units))
    out.print(table)
    out.print(
        f"total flow {result['total_flow']}, objective {result['objective']:.6g}",
        highlight=False,
    )


@reproduce_app.command("romosan")
def reproduce_romosan(
    out_dir: ReportDirOpt,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", metavar="", help="2,000 jobs and fewer cluster sizes (a minute or two)."
        ),
    ] = False,
    as_json: JsonOpt = False,
    resume: ResumeOpt = False,
    processes: ProcessesOpt = None,
    scheduler: SchedulerOpt = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
) -> None:
    """Re-run the experiments of romosan (co-scheduling data movement with computation):
    10,000 jobs over 100 files on 1 to 32 servers under FIFO, SJF and the min-cost flow;
    one batch of the flow at 2 K to 64 K files x 32 servers; Zipf popularity with a small and
    an infinite cache; delays between batches. Writes the figures (CSV and PNG), and a report
    with the paper's statement beside our number for every claim and the cluster we chose
    (the paper gives only its 20 GB caches). While it runs, stderr shows each simulation as
    it finishes (under a status line on a terminal, a line each otherwise). `--json` prints
    `{"claims": [{"key", "paper", "ours", "agrees", ...}], "report", "figures", "quick"}`.
    A `--quick` run says so at the top of its report and under its table. Each run's result
    is kept in DIR/runs/ as it finishes; interrupted (Ctrl-C, SIGTERM), the command keeps
    what finished, says so and exits with status 130; `--resume` goes on from there."""
    from datasched.studies.report import quick_note
    from datasched.studies.romosan import runs as romosan
    from datasched.studies.romosan.reproduce import run_romosan, write_romosan

    check_out_dir(out_dir)
    processes, target = where_to_run(processes, scheduler, tls_ca_file, tls_cert, tls_key)
    study = romosan.QUICK if quick else romosan.FULL
    tag = {"study": "romosan", "quick": quick, "sizes": asdict(study)}
    store = kept_runs(out_dir, tag, resume=resume)
    with keeping_runs(store), run_progress() as say, cluster_errors():
        outcome = run_romosan(
            study, processes=processes, scheduler=target, progress=say, store=store
        )
    with user_errors():
        md_path, figs = write_romosan(outcome, out_dir, quick=quick)
    if as_json:
        print_json(
            {
                "claims": [{**asdict(c), "agrees": c.agrees} for c in outcome.claims],
                "report": str(md_path),
                "figures": [str(f.png_path) for f in figs],
                "quick": quick,
            }
        )
        return
    title = f"romosan: paper vs datasched{QUICK_TITLE if quick else ''}"
    table = claims_table(title, outcome.claims, by_key=True)
    out.print(table)
    if quick:
        out.print(quick_note("datasched reproduce romosan", markdown=False), highlight=False)
    out.print(f"report: {md_path}", highlight=False)
    out.print(f"figures: {out_dir / 'figures'}", highlight=False)
