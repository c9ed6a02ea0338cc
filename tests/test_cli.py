"""The command line: JSON output, files written, and one clear error line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app

runner = CliRunner()

SIM_KEYS = {
    "policy",
    "load_jobs_per_h",
    "jobs_measured",
    "mean_wait_s",
    "mean_processing_s",
    "mean_speedup",
    "cache_hit_ratio",
    "tertiary_bytes",
    "utilization",
    "overloaded",
}


def test_sim_json_has_every_key() -> None:
    result = runner.invoke(app, ["sim", "--policy", "cache-splitting", "--jobs", "80", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= SIM_KEYS
    assert data["policy"] == "cache-splitting"
    assert data["jobs_measured"] > 0


def test_policy_parameters_reach_the_policy() -> None:
    args = ["sim", "-p", "cache-splitting", "-P", "fill_duplicates=false", "--jobs", "60"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == "cache-splitting"


def test_named_policy_options_reach_the_policy() -> None:
    args = ["sim", "-p", "delayed", "--period-h", "12", "--stripe-events", "2000"]
    result = runner.invoke(app, [*args, "--jobs", "80", "--load", "0.3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # Jobs wait for the end of a 12 h period: on average about half of it.
    assert data["mean_wait_s"] - data["mean_wait_excl_delay_s"] > 3 * 3600
    args = ["sim", "-p", "out-of-order", "--replicate-after", "3", "--fairness-h", "24"]
    result = runner.invoke(app, [*args, "--jobs", "60", "--json"])
    assert result.exit_code == 0, result.output


def test_policies_lists_the_policies() -> None:
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    for name in ("farm", "splitting", "cache-splitting", "out-of-order"):
        assert name in result.stdout


def test_sweep_writes_csv_and_png(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", "--policies", "farm,cache-splitting", "--loads", "0.2,0.6"]
    args += ["--cache-gb", "50,100", "--jobs", "60", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 + 2 * 2  # header, farm x 2 loads, cache-splitting x 2 caches x 2
    png = (out / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no temporary left


def test_max_load_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["max-load", "--policy", "farm", "--jobs", "300", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 0.5 < data["max_load_jobs_per_h"] < 2.0
    assert data["probes"]


def test_scale_json() -> None:
    result = runner.invoke(
        app, ["scale", "--policy", "farm", "--nodes", "10,20", "--jobs", "40", "--json"]
    )
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)
    assert [p["n_nodes"] for p in points] == [10, 20]
    assert all(p["master_load"] > 0 for p in points)


def test_trace_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    result = runner.invoke(app, ["trace", "generate", "--out", str(path), "--jobs", "50"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["trace", "show", str(path)])
    assert result.exit_code == 0 and "50 jobs" in result.stdout
    result = runner.invoke(app, ["sim", "--trace", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs_measured"] > 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "--policy", "nope"], "--policy: unknown policy 'nope'"),
        (["sim", "--load", "-1"], "--load: must be a positive number"),
        (["sim", "--nodes", "0"], "--nodes: must be a positive number"),
        (["sim", "--jobs", "0"], "--jobs: must be a positive number"),
        (["sim", "--cache-gb", "-5"], "--cache-gb: must be zero or positive"),
        (["max-load", "--policy", "nope"], "--policy: unknown policy"),
        (["sweep", "--loads", "a,b"], "--loads: expected a comma list"),
        (["sweep", "--policies", "farm,nope"], "--policy: unknown policy 'nope'"),
        (["sweep", "--loads", "0.5,-1"], "--load: must be a positive number"),
        (["sim", "-p", "out-of-order", "-P", "colour=3"], "has no parameter 'colour'"),
        (["sim", "-p", "farm", "--period-h", "3"], "--period-h: policy 'farm' takes no such"),
        (["sim", "-p", "delayed", "--stripe-events", "0"], "stripe_events: must be positive"),
        (["sweep", "--policies", "farm", "--fairness-h", "2"], "--fairness-h: none of the"),
        (["sim", "-p", "out-of-order", "-P", "fairness_h=-1"], "fairness_h: must be positive"),
        (["sim", "-p", "out-of-order", "-P", "fairness_h=soon"], "expected a number"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    if args[0] == "sweep":
        args = [*args, "--out", str(out), "--jobs", "40"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert needle in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_malformed_trace_names_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_s,start_event,n_events\n0,1.0,10,100\n1,2.0,20,-3\n")
    result = runner.invoke(app, ["sim", "--trace", str(path)])
    assert result.exit_code == 2
    assert "bad.csv line 3: field 'n_events'" in result.stderr


def test_bad_pipeline_is_rejected_by_the_parser() -> None:
    result = runner.invoke(app, ["sim", "--pipeline", "sideways"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "command",
    [[], ["sim"], ["max-load"], ["sweep"], ["policies"], ["trace", "generate"], ["demo-sim"]],
)
def test_help_explains(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert len(result.stdout) > 200
