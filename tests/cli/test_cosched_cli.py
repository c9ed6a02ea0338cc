"""``datasched cosched solve`` and ``datasched reproduce romosan``: JSON output, files
written, and one error line (exit 2, nothing written) for bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.studies.romosan import runs as romosan

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def example() -> dict[str, Any]:
    return {
        "local_cost": 1,
        "remote_cost": 10,
        "files": [
            {"id": "f1", "popularity": 5, "holders": ["s1"]},
            {"id": "f2", "popularity": 3, "holders": []},
        ],
        "servers": [{"id": "s1", "free_slots": 7}, {"id": "s2", "free_slots": 4}],
    }


def write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("network", ["grouped", "full"])
def test_solve_json_is_the_flow(tmp_path: Path, network: str) -> None:
    path = write(tmp_path, example())
    result = runner.invoke(app, ["cosched", "solve", str(path), "--json", "--network", network])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"total_flow", "objective", "flow"}
    assert data["total_flow"] == 8
    assert data["objective"] == pytest.approx(10.0)
    assert ["f1", "s1", 5] in data["flow"]
    assert sum(units for _, _, units in data["flow"]) == 8


def test_solve_prints_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, example())
    result = runner.invoke(app, ["cosched", "solve", str(path)])
    assert result.exit_code == 0, result.output
    assert "total flow 8, objective 10" in result.stdout


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({**example(), "remote_cost": -3}, "error: remote_cost: must not be negative"),
        (
            {**example(), "servers": [{"id": "s1", "free_slots": 2.5}]},
            "error: servers[0].free_slots: expected a whole number, got 2.5",
        ),
        (
            {**example(), "files": [{"id": "f1", "popularity": -1}]},
            "error: files[0].popularity: must not be negative, got -1",
        ),
        ([], "error: instance: expected a JSON object"),
    ],
)
def test_bad_instances_are_one_line_exit_2(tmp_path: Path, doc: Any, needle: str) -> None:
    path = write(tmp_path, doc)
    result = runner.invoke(app, ["cosched", "solve", str(path), "--json"])
    assert result.exit_code == 2
    assert result.stderr.startswith(needle), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_unknown_holder_names_the_server(tmp_path: Path) -> None:
    doc = example()
    doc["files"][0]["holders"] = ["s9"]
    result = runner.invoke(app, ["cosched", "solve", str(write(tmp_path, doc))])
    assert result.exit_code == 2
    assert result.stderr == "error: files[0].holders[0]: unknown server 's9'\n"


def test_not_json_and_bad_network_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    result = runner.invoke(app, ["cosched", "solve", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "not JSON" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    ok = write(tmp_path, example())
    result = runner.invoke(app, ["cosched", "solve", str(ok), "--network", "dense"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --network: must be one of grouped, full")


def test_reproduce_romosan_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick reproduction at a tiny size (the sizes are the only difference; the smoke
    run of tests/studies/test_romosan.py checks the claims)."""
    tiny = replace(romosan.SMOKE, jobs=60, zipf_jobs=40, edge_files=(256,), edge_jobs=100)
    monkeypatch.setattr(romosan, "QUICK", tiny)
    out = tmp_path / "out"
    args = ["reproduce", "romosan", "--quick", "--json", "--out", str(out), "-j", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    keys = {c["key"] for c in data["claims"]}
    assert {"fifo_over_lp_copies", "sjf_over_lp_makespan"} <= keys
    for claim in data["claims"]:
        assert {"key", "paper", "ours", "agrees"} <= set(claim)
        assert isinstance(claim["agrees"], bool)
    assert Path(data["report"]) == out / "report.md"
    assert (out / "claims.csv").exists()
    for png in data["figures"]:
        assert Path(png).read_bytes()[:8] == PNG_MAGIC
        assert Path(png).with_suffix(".csv").exists()
    assert data["quick"] is True
    top = (out / "report.md").read_text().split("\n\n")[1]  # under the title
    assert top.startswith("**Quick run** (`datasched reproduce romosan --quick`): reduced")


def test_a_quick_run_shows_its_progress_and_says_it_is_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = replace(romosan.SMOKE, jobs=60, zipf_jobs=40, edge_files=(256,), edge_jobs=100)
    monkeypatch.setattr(romosan, "QUICK", tiny)
    args = ["reproduce", "romosan", "--quick", "--out", str(tmp_path / "out"), "-j", "1"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # Progress, as reproduce ponce gives it without a terminal: a line a finished run.
    n = len(romosan.study_runs(tiny))
    lines = result.stderr.splitlines()
    assert lines[0] == f"{n} simulations in 1 processes, then 1 timed batches alone"
    done = [line for line in lines if line.startswith("[")]
    assert [line.split("]")[0] for line in done[:n]] == [f"[{k}/{n}" for k in range(1, n + 1)]
    assert all(line.endswith(" s)") and " servers (" in line for line in done[:n])
    # then the timed batch, alone
    assert done[n:] == [line for line in done[n:] if line.startswith("[1/1] one batch")]
    assert "one batch of the min-cost flow at 256 files" in done[n]
    words = " ".join(result.stdout.split())  # the title wraps to the table's width
    assert "romosan: paper vs datasched (quick run: reduced sizes)" in words
    assert "quick run (--quick): reduced sizes" in result.stdout


def test_reproduce_romosan_refuses_a_file_as_out(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    result = runner.invoke(app, ["reproduce", "romosan", "--quick", "--out", str(target)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --out: ")
    assert target.read_text() == "x"
