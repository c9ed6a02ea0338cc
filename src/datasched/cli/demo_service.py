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


ETA_CAPTION = (
    "events: done/to do (one figure once all are done; -: a command, which reads none). "
    "ETA: seconds left while a request runs; once it ended, its first ETA less the real "
    "finish (+: it ended sooner than predicted)."
)
"""The caption: the units and signs the cells leave out, so that the table fits 80 columns.
Once a request ended, its ETA cell is its first ETA's error with the sign of
``error_at_submission_s`` in the JSON (``datasched.service.eta.eta_error``: predicted minus
actual, positive when it ended sooner than predicted)."""


def _events(r: dict[str, Any]) -> str:
    """A request's events: ``done/to do``, the one figure once all are done, a dash for a
    command's (its progress counts none)."""
    done, total = r.get("events"), r.get("events_total")
    if r.get("kind") == "command" or done is None or total is None:
        return "-"
    return f"{total:,}" if done == total else f"{done:,}/{total:,}"


def _eta(r: dict[str, Any]) -> str:
    eta = r.get("eta") or {}
    left, error = eta.get("seconds_left"), eta.get("error_at_submission_s")
    if left is not None:
        return f"{left:.0f} s"
    if error is not None:  # ended: how wrong the first prediction was, signed as stored
        return f"{error:+.1f} s"
    return "-"


def _table(rows: list[dict[str, Any]]) -> Any:
    """The requests, one row each, fitting 80 columns: a light frame, short headers (the
    units in the caption), every figure whole; only a long title wraps."""
    from rich import box
    from rich.table import Table

    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        caption=ETA_CAPTION,
        caption_justify="left",
    )
    for name in ("user", "group", "form", "request", "state", "jobs", "events", "ETA"):
        # Figures and one-word states whole: the request's title wraps instead.
        right = name in {"jobs", "events", "ETA"}
        table.add_column(
            name,
            no_wrap=name != "request",
            overflow="fold",
            justify="right" if right else "left",
            min_width=12 if name == "request" else None,
        )
    for r in rows:
        table.add_row(
            r["user"],
            r["group"],
            r["form"],
            r["title"] or r["id"],
            r["state"],
            str(r["jobs"]),
            _events(r),
            _eta(r),
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
