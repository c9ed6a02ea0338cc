"""``datasched demo-service``: the service's scene of the tour (see
:mod:`datasched.service.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from datasched.cli.app import app
from datasched.cli.common import check_out_dir, err, fail, out
from datasched.cli.runtime import PolicyOption, WorkersOption, runtime_errors

__all__: list[str] = []


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table("user", "group", "form", "request", "state", "jobs", "events", "ETA")
    for r in rows:
        eta = r.get("eta") or {}
        left, error = eta.get("seconds_left"), eta.get("error_at_submission_s")
        if left is not None:
            eta_text = f"{left:.0f} s left"
        elif error is not None:  # ended: how wrong the first prediction was
            eta_text = f"off by {-error:+.1f} s"
        else:
            eta_text = "-"
        table.add_row(
            r["user"],
            r["group"],
            r["form"],
            r["title"] or r["id"],
            r["state"],
            str(r["jobs"]),
            f"{r['events']:,} / {r['events_total']:,}",
            eta_text,
        )
    return table


@app.command("demo-service")
def demo_service(
    data_dir: Annotated[
        Path, typer.Option("--data", metavar="DIR", help="Demo dataset (created if absent).")
    ] = Path("out/demo-data"),
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="The summary and the screenshot.")
    ] = Path("out/service-demo"),
    policy: PolicyOption = "out-of-order",
    workers: WorkersOption = 2,
    screenshot: Annotated[
        bool, typer.Option(help="Take the dashboard's screenshot (needs Chromium).")
    ] = True,
) -> None:
    """The service on loopback: a daemon over a fresh store with the demo dataset in its
    catalog; three users submit overlapping requests (YAML, STAR's XML, a command) at once;
    their progress is shown live until they end; the summary (and the dashboard's screenshot,
    where a headless Chromium is installed) is written to --out."""
    try:
        from rich.live import Live

        from datasched.service.demo import run_service_demo
    except ModuleNotFoundError as exc:
        fail(f"the service is not installed ({exc.name}): pip install 'datasched[all]'")
    check_out_dir(data_dir, "--data")
    check_out_dir(out_dir, "--out")
    with runtime_errors():
        if not (data_dir / "catalog.yaml").exists():
            from datasched.runtime.demodata import write_demo_dataset

            err.print(f"writing the demo dataset to {data_dir} ...")
            write_demo_dataset(data_dir)
        with Live(_table([]), console=err, refresh_per_second=4) as live:
            summary = run_service_demo(
                out_dir,
                data_dir,
                workers=workers,
                policy=policy,
                screenshot=screenshot,
                on_progress=lambda rows: live.update(_table(rows)),
            )
    out.print(_table(summary["requests"]))
    out.print(
        f"{len(summary['requests'])} requests of 3 users in {summary['elapsed_s']:.1f} s "
        f"under {policy}; summary: {out_dir / 'summary.json'}",
        highlight=False,
    )
    if summary["screenshot"]:
        out.print(f"dashboard: {summary['screenshot']}", highlight=False)
    if any(r["state"] != "completed" for r in summary["requests"]):
        raise typer.Exit(1)
