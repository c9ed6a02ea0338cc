"""``datasched reproduce ponce --quick``: every figure as CSV and PNG, every claim in the
report (the full run is the committed docs/reproduction-ponce.md). How long it takes is not
checked here: a test's wall-clock time says more about the machine than about the code, and
timings belong in the benchmarks.

Marked slow: the quick run takes about 200 s of CPU (two minutes on two cores), which with the other
papers' reproductions put the default run past ten minutes. The default run still checks
the quick claims against the paper (tests/studies/test_paper_ponce.py).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.studies.ponce.figures import figure_specs
from datasched.studies.ponce.reproduce import Claim

pytestmark = pytest.mark.slow

FIGURES = ["fig03", "fig04", "fig05", "fig06", "fig07", "fig08", "fig09", "fig10", "fig11"]
FIGURES += ["fig12", "fig14", "fig15", "fig16"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("repro")
    # Two processes, as on the 2-core CI machine: the parallel path is the one exercised.
    args = ["reproduce", "ponce", "--quick", "--processes", "2", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_every_figure_is_written(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    assert [s.key for s in figure_specs(quick=True)] == FIGURES
    for key in FIGURES:
        png = out / "figures" / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
        with (out / "figures" / f"{key}.csv").open() as fh:
            rows = list(csv.DictReader(fh))
        assert rows, key


def test_report_has_the_claims_and_figures(quick_run: tuple[Path, str]) -> None:
    out, output = quick_run
    report = (out / "report.md").read_text()
    for key in ("ooo_over_cs_max_load", "replication_rate", "delayed_week_200gb_stripe200"):
        assert key in (out / "claims.csv").read_text()
    for key in FIGURES:
        assert f"figures/{key}.png" in report
    assert "claims agree within their tolerance" in report
    assert "report:" in output


def test_figure_rows_cut_overloaded_points(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    with (out / "figures" / "fig03.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    farm = [r for r in rows if r["series"] == "processing farm"]
    # The processing farm saturates near 1.1 jobs/h: the quick grid reaches 1.5.
    assert farm[0]["overloaded"] == "False"
    assert farm[-1]["overloaded"] == "True"


def test_claim_bounds() -> None:
    under = Claim("k", "s", "c", 0.5, 0.2, "%", 0.0, bound="at_most")
    over = Claim("k", "s", "c", 0.5, 0.7, "%", 0.0, bound="at_most")
    assert under.agrees
    assert not over.agrees
    assert Claim("k", "s", "c", 1.0, 1.2, "", 0.0, bound="at_least").agrees
    assert not Claim("k", "s", "c", 1.0, 0.8, "", 0.0, bound="at_least").agrees


def test_processes_must_be_positive(tmp_path: Path) -> None:
    out = tmp_path / "repro"
    args = ["reproduce", "ponce", "-j", "0", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--processes: must be at least 1" in result.output
    assert not out.exists()
