"""Commands that describe: ``policies`` (what each does, its parameters) and ``trace``
(make and inspect job traces; read a scheduler's trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from datasched.cli.app import app, trace_app
from datasched.cli.common import check_out_file, fail, out, print_json, user_errors
from datasched.cli.options import JsonOpt, LoadOpt, SeedOpt, trace_rate_jobs_per_h
from datasched.core.trace import read_json_lines, story
from datasched.policies import available, describe
from datasched.policies.grid.schedulers import describe_grid_scheduler, grid_schedulers
from datasched.sim.workload import WorkloadSpec, generate, load_trace, save_trace

__all__: list[str] = []

PARAM_WIDTH = 25
"""The parameters' column: the longest NAME=VALUE of the registry's usual ones."""
NAME_WIDTH = 20
"""The name column, at most: the longest name is 19 characters; its source wraps under it."""


@app.command()
def policies(as_json: JsonOpt = False) -> None:
    """List the scheduling policies: name (for `--policy`), the paper section each implements,
    what it does, and its parameters (for `-P NAME=VALUE`, and the named options shown by
    `datasched sim --help`). With `--json`, every policy's declaration: each parameter's name,
    type, default, bounds, choices and help. The data grid's external and dataset schedulers
    (`datasched reproduce grid`) follow, in a table (and a JSON list, `grid_schedulers`) of
    their own: they pick sites of a grid, not nodes of a cluster."""
    if as_json:
        print_json(
            {
                "policies": [describe(name) for name in available()],
                "grid_schedulers": [describe_grid_scheduler(name) for name in grid_schedulers()],
            }
        )
        return
    # Three columns, so that each can be read at 80 columns too: the name (never cut: it is
    # what --policy takes) with its source under it, what it does (wrapping at spaces), and
    # a parameter a line in a column as wide as the longest usual NAME=VALUE (what -P
    # takes: split mid-word, it reads wrong).
    table = _table("scheduling policies")
    for name, cls in available().items():
        table.add_row(_named(name, cls.section), cls.summary, _params(cls.params))
    out.print(table)
    grid = _table("data-grid schedulers (datasched reproduce grid)")
    for name, gcls in grid_schedulers().items():
        grid.add_row(
            _named(name, f"{gcls.role} scheduler, {gcls.section}"),
            gcls.summary,
            _params(gcls.params),
        )
    out.print(grid)


def _table(title: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, leading=1)
    table.add_column("name, source", overflow="fold", max_width=NAME_WIDTH)
    table.add_column("what it does", overflow="fold", ratio=1)
    table.add_column("parameters", overflow="fold", width=PARAM_WIDTH)
    return table


def _named(name: str, source: str) -> Text:
    return Text.assemble((name, "bold"), "\n", (source, "dim"))


def _params(params: Any) -> str:
    return "\n".join(f"{p.name}={_shown(p.default)}" for p in params) or "-"


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


@trace_app.command("generate")
def trace_generate(
    out_file: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Trace CSV to write (replaced if there).")
    ],
    load: LoadOpt = 1.0,
    jobs: Annotated[int, typer.Option("--jobs", metavar="N", help="Jobs in the trace.")] = 1000,
    seed: SeedOpt = 0,
) -> None:
    """Write a synthetic job trace with the paper's workload: Erlang-4 job sizes of mean
    40,000 events, start points falling half of the time in two hot regions that hold 10 % of
    the data, Poisson arrivals. Replay it with `datasched sim --trace FILE`."""
    with user_errors():
        records = generate(WorkloadSpec(load_jobs_per_h=load, n_jobs=jobs, seed=seed))
    check_out_file(out_file, "--out")
    with user_errors():
        save_trace(records, out_file)
    out.print(f"wrote {len(records)} jobs to {out_file}", highlight=False)


@trace_app.command("show")
def trace_show(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="Trace CSV to check and summarise.")],
) -> None:
    """Check a trace and summarise it: number of jobs, time span, arrival rate, mean size."""
    with user_errors():
        records = load_trace(path)
    span = records[-1].submit_s - records[0].submit_s
    mean = sum(r.n_events for r in records) / len(records)
    rate = trace_rate_jobs_per_h(records)
    rate_text = f"{rate:.3g} jobs/h" if rate is not None else "no rate: one submission time"
    out.print(f"{len(records)} jobs over {span / 3600:.1f} h ({rate_text})", highlight=False)
    out.print(
        f"mean size {mean:,.0f} events; "
        f"data space used up to event {max(r.stop_event for r in records):,}",
        highlight=False,
    )


def _story_line(record: dict[str, Any]) -> str:
    """One record of a story as a line: ``#stimulus kind what``."""
    kind = record.get("kind")
    detail = record.get("detail") or {}
    if kind == "event":
        head = f"#{record.get('stimulus')} {record.get('time', 0):12.1f}"
        return f"{head}  {record.get('type')} {detail}"
    if kind == "transition":
        slot = record.get("slot", -1)
        where = f" on slot {slot}" if slot is not None and slot >= 0 else ""
        return (
            f"#{record.get('stimulus')} {record.get('time', 0):12.1f}    subjob "
            f"{record.get('subjob')}: {record.get('from') or 'new'} -> {record.get('to')}{where}"
        )
    detail = {k: v for k, v in detail.items() if k != "subjob"} | (
        {"subjob": detail["subjob"].get("subjob"), "data": detail["subjob"].get("data")}
        if isinstance(detail.get("subjob"), dict)
        else {}
    )
    return f"#{record.get('cause')} {'':12}    -> {record.get('type')} {detail}"


@trace_app.command("story")
def trace_story(
    path: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="A scheduler's trace (JSON lines, from --trace-log)."),
    ],
    job: Annotated[int, typer.Option("--job", metavar="N", help="The job to tell about.")],
    as_json: JsonOpt = False,
) -> None:
    """Why a job went where it went: from a trace written by `datasched sim --trace-log` or
    `datasched run --trace-log`, every record that names the job (its arrival, each change
    of its subjobs' states with the slot, the actions about it) and the events that caused
    them (a finish that freed the slot it took, a node lost under it), oldest first. Each
    line starts with the stimulus id of the event it belongs to. `--json`: the records, as
    a list."""
    if not path.is_file():
        fail(f"FILE: {path} is not a file")
    with user_errors(), path.open(encoding="utf-8") as stream:
        try:
            records = read_json_lines(stream)
        except ValueError as exc:
            fail(f"FILE: {path}: {exc}")
    told = story(records, job)
    if as_json:
        print_json(told)
        return
    if not told:
        fail(f"--job: job {job} is not in {path}")
    for record in told:
        out.print(_story_line(dict(record)), markup=False, highlight=False, soft_wrap=True)
