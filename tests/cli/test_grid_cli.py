"""``datasched reproduce grid``: the quick reproduction's JSON claims, report and figures;
one error line (exit 2, nothing written) for a bad ``--out`` or ``--local``; the full run and a
cluster policy at the sites (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.policies.registry import available

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = {
    "best_es_without_replication",
    "worst_es_without_replication",
    "best_pair",
    "dp_repl_over_best_norepl_response",
    "datarandom_over_dataleastloaded_response",
    "local_over_dp_response_at_100mbs",
    "dp_transfer_mb_per_job_minus_others",
}


def reproduce(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "grid"
    args = ["reproduce", "grid", *extra, "--out", str(out), "--json", "--processes", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    assert Path(doc["report"]) == out / "report.md"
    report = (out / "report.md").read_text()
    by_key = {c["key"]: c for c in doc["claims"]}
    assert set(by_key) >= KEYS
    for c in doc["claims"]:
        assert {"key", "paper", "ours", "agrees"} <= set(c)
        assert f"`{c['key']}`" in report  # every claim has its row, with its note
        assert c["note"]
    assert len(doc["figures"]) == 4
    for png in doc["figures"]:
        assert Path(png).read_bytes().startswith(PNG_MAGIC)
    assert (out / "runs.csv").read_text().count("\n") > 30
    quick = "--quick" in extra
    assert doc["quick"] is quick
    assert report.split("\n\n")[1].startswith("**Quick run**") is quick
    return by_key


def test_reproduce_grid_quick(tmp_path: Path) -> None:
    claims = reproduce(tmp_path, "--quick")
    # progress reaches stderr without a terminal (a log, a batch job's output)
    result = runner.invoke(
        app, ["reproduce", "grid", "--quick", "--out", str(tmp_path / "again"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "running the reproduction" in result.stderr
    # Lines are numbered as runs end, so which pair is first depends on the processes.
    lines = re.findall(r"^\[(\d+)/30\] Job\w+ \+ Data\w+, pairs \(", result.stderr, re.M)
    assert lines == [str(n) for n in range(1, 31)]
    # Results the model gives whatever the seed: JobDataPresent moves only replicas, the
    # others fetch most jobs' data (the quantity behind Fig. 3b), and replication is
    # needed for JobDataPresent's best (the paper's main finding).
    assert claims["dp_transfer_mb_per_job_minus_others"]["agrees"] is True
    assert claims["dp_repl_over_best_norepl_response"]["agrees"] is True
    assert claims["best_pair"]["ours"].startswith("JobDataPresent + Data")


def test_reproduce_grid_refuses_a_file_as_out(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    result = runner.invoke(app, ["reproduce", "grid", "--quick", "--out", str(target)])
    assert result.exit_code == 2
    assert "--out" in result.output
    assert target.read_text() == "x"


@pytest.mark.slow
def test_reproduce_grid_full(tmp_path: Path) -> None:
    claims = reproduce(tmp_path)
    assert claims["best_pair"]["agrees"] is True
    assert "Sensitivity" in (tmp_path / "grid" / "report.md").read_text()


def test_reproduce_grid_explains_itself() -> None:
    result = runner.invoke(app, ["reproduce", "grid", "--help"])
    assert result.exit_code == 0
    assert "--quick" in result.output
    assert "ranganathan-foster" in result.output
    assert "--local" in result.output


def test_reproduce_grid_refuses_an_unknown_local_scheduler(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    args = ["reproduce", "grid", "--quick", "--local", "lifo", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "--local" in result.output
    assert "'lifo'" in result.output
    assert "fifo" in result.output
    assert "data-ready" in result.output
    assert not out.exists()


@pytest.mark.slow
def test_reproduce_grid_with_a_cluster_policy_at_the_sites(tmp_path: Path) -> None:
    local = sorted(available())[0]
    reproduce(tmp_path, "--quick", "--local", local)
    report = (tmp_path / "grid" / "report.md").read_text()
    assert f"--local {local}" in report
    rows = (tmp_path / "grid" / "runs.csv").read_text().splitlines()
    lan = rows[0].split(",").index("lan_mb_per_job")
    assert all(float(r.split(",")[lan]) > 0 for r in rows[1:])
