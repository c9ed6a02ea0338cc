"""``datasched demo-service``: the service's scene of the tour (see
:mod:`datasched.service.demo`)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from datasched.cli.app import app
from datasched.cli.common import check_out_dir, err, fail, out
from datasched.cli.runtime import PolicyOption, WorkersOption, runtime_errors

__all__: list[str] = []


ETA_CAPTION = "ETA error: the first ETA less the real finish (+: ended sooner than predicted)"
"""The ETA column: seconds left while a request runs; once it ended, its first ETA's error
with the sign of ``error_at_submission_s`` in the JSON (``datasched.service.eta.eta_error``:
predicted minus actual, positive when it ended sooner than predicted)."""


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(caption=ETA_CAPTION)
    for name in ("user", "group", "form", "request", "state", "jobs", "events", "ETA"):
        # A state is one word (completed, running): whole, the request's title wraps instead.
        table.add_column(name, no_wrap=name in {"state", "jobs"})
    for r in rows:
        eta = r.get("eta") or {}
        left, error = eta.get("seconds_left"), eta.get("error_at_submission_s")
        if left is not None:
            eta_text = f"{left:.0f} s left"
        elif error is not None:  # ended: how wrong the first prediction was, signed as stored
            eta_text = f"error {error:+.1f} s"
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
        bool,
        typer.Option(
            help="Take the dashboard's screenshot (needs Chromium, apt install chromium, and "
            "Playwright; without them one line says so)."
        ),
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
        catalog = data_dir / "catalog.yaml"
        from datasched.runtime.demodata import demo_dataset_is_current, write_demo_dataset

        if not catalog.exists() or not demo_dataset_is_current(catalog):
            err.print(f"writing the demo dataset to {data_dir} ...")
            write_demo_dataset(data_dir)
        # The live table only on a terminal, and gone when the run ends: the final table is
        # printed once (a Live without a terminal prints its last state when it stops).
        live = Live(_table([]), console=err, refresh_per_second=4, transient=True)
        with live if err.is_terminal else nullcontext():
            summary = run_service_demo(
                out_dir,
                data_dir,
                workers=workers,
                policy=policy,
                screenshot=screenshot,
                on_progress=(lambda rows: live.update(_table(rows))) if err.is_terminal else None,
            )
    out.print(_table(summary["requests"]))
    out.print(
        f"{len(summary['requests'])} requests of 3 users in {summary['elapsed_s']:.1f} s "
        f"under {policy}; summary: {out_dir / 'summary.json'}",
        highlight=False,
    )
    if summary["screenshot"]:
        out.print(f"dashboard: {summary['screenshot']}", highlight=False)
    elif summary.get("screenshot_missing"):
        err.print(summary["screenshot_missing"], markup=False, highlight=False, soft_wrap=True)
    if any(r["state"] != "completed" for r in summary["requests"]):
        raise typer.Exit(1)
