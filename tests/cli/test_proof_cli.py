"""``datasched reproduce proof`` (the quick reproduction, run once here) and ``datasched
proof-sim``: JSON, files written, one error line for bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = {
    "adaptive_over_basic_time",
    "adaptive_over_basic_time_runtime",
    "quota_max_error_pp",
    "tail_fraction_basic",
    "tail_fraction_adaptive",
}


def test_the_quick_reproduction_writes_its_report_and_prints_its_claims(tmp_path: Path) -> None:
    result = runner.invoke(app, ["reproduce", "proof", "--quick", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1
    claims = {c["key"]: c for c in json.loads(result.stdout)["claims"]}
    assert set(claims) >= KEYS
    for c in claims.values():
        assert set(c) >= {"key", "paper", "ours", "agrees"}
    runtime = claims["adaptive_over_basic_time_runtime"]
    assert runtime["ours"] is None and runtime["agrees"] is None  # not measured, said so
    assert claims["quota_max_error_pp"]["agrees"] is True
    assert claims["tail_fraction_adaptive"]["ours"] < claims["tail_fraction_basic"]["ours"]
    report = (tmp_path / "report.md").read_text()
    assert "not measured" in report and "fig3_4_uneven.png" in report
    with (tmp_path / "claims.csv").open() as fh:
        assert {r["key"] for r in csv.DictReader(fh)} == set(claims)
    figures = tmp_path / "figures"
    for png in ("fig3_4_uneven.png", "fig6_quotas.png"):
        assert (figures / png).read_bytes().startswith(PNG_MAGIC)
    with (figures / "packets_basic_packetizer.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["category"] for r in rows} <= {"local", "other worker", "non-worker"}
    assert {"worker", "node", "file", "events", "processing_s", "cpu_s", "bytes"} <= set(rows[0])
    with (figures / "quota.csv").open() as fh:
        assert [r["group"] for r in csv.DictReader(fh)] == ["g10", "g20", "g30", "g40"]


def test_reproduce_proof_refuses_an_out_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    result = runner.invoke(app, ["reproduce", "proof", "--quick", "--out", str(target)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --out: {target} exists and is not a directory"
    ]


def test_proof_sim_monitors_the_packets(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["proof-sim", "--report", str(tmp_path), "--files", "40", "-p", "basic-packetizer",
         "-P", "max_workers_per_node=2", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["policy"] == "basic-packetizer" and data["processing_s"] >= data["bound_s"]
    assert sum(data["events_by_category"].values()) == 40 * 2000
    with (tmp_path / "packets.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == data["packets"]
    with (tmp_path / "progress.csv").open() as fh:
        assert {"events_per_s", "mb_per_s", "active_workers"} <= set(next(csv.DictReader(fh)))
    assert (tmp_path / "packets.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-p", "nope"], "error: --policy: unknown policy 'nope'"),
        (["-P", "fraction=0"], "error: -P fraction: must be above 0, got 0.0"),
        (["-P", "quotas=a"], "error: -P quotas: expected GROUP=POSITIVE_NUMBER, got 'a'"),
        (["--files", "0"], "error: --files: must be at least 1"),
    ],
)
def test_proof_sim_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], line: str
) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["proof-sim", "--report", str(out), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line)
    assert not out.exists()
