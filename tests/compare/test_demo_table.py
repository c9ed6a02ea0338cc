"""The demo's comparison table, as `make demo` prints it into a log or a pipe (80 columns)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from datasched.compare.demo import DemoResult, Floor
from datasched.runtime.reports import JobReport, RunReport


def _run(policy: str, makespan_s: float) -> RunReport:
    job = JobReport("zpeak-1", events_expected=960_000, events_processed=960_000)
    return RunReport(policy=policy, makespan_s=makespan_s, jobs=[job], packets=[])


def test_table_fits_80_columns_without_cutting_a_figure() -> None:
    result = DemoResult(
        runs={"farm": _run("farm", 33.14), "out-of-order": _run("out-of-order", 11.25)},
        baseline=_run("dask map", 19.42),
        predictions={"farm": 32.72, "out-of-order": 8.81},
        plot=Path("out/dimuon-mass.png"),
        params={"out-of-order": {"replication": True}},
        floors={"farm": Floor(3.66, 2.1), "out-of-order": Floor(3.66, 5.24)},
    )
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(result.table())
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for figure in ("33.1 s", "11.2 s", "19.4 s", "32.7 s", "8.8 s", "3.7 s", "5.2 s"):
        assert figure in text
    assert "replication=True" in text
    # A run that did not process every event says how many it did.
    result.baseline.jobs[0].events_processed = 480_000
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(result.table())
    assert "480,000 of 960,000" in console.export_text()
