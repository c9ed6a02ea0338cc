"""The command line: JSON output, files written, and one clear error line for bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched import __version__
from datasched.cli import app
from datasched.cli import sim as cli_sim
from datasched.sim import parallel
from runtime_support import free_port

# typer's runner keeps stdout and stderr apart (``result.output`` has both, interleaved).
runner = CliRunner()

SIM_KEYS = {
    "policy",
    "load_jobs_per_h",
    "n_nodes",
    "cache_gb",
    "pipeline",
    "jobs_measured",
    "mean_wait_s",
    "median_wait_s",
    "p95_wait_s",
    "max_wait_s",
    "mean_processing_s",
    "mean_speedup",
    "cache_hit_ratio",
    "peer_read_ratio",
    "tertiary_bytes",
    "utilization",
    "mean_backlog",
    "overloaded",
    "events_handled",
    "wall_s",
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_sim_json_is_one_object_with_every_key() -> None:
    result = runner.invoke(app, ["sim", "--policy", "cache-splitting", "--jobs", "80", "--json"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1
    data = json.loads(result.stdout)
    assert set(data) >= SIM_KEYS
    assert data["policy"] == "cache-splitting"
    assert data["n_nodes"] == 10
    assert data["pipeline"] == "none"
    assert data["jobs_measured"] > 0


def test_sim_table_is_in_human_units() -> None:
    result = runner.invoke(app, ["sim", "--policy", "cache-splitting", "--jobs", "60"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "mean wait" in text
    assert " h " in text  # hours
    assert "%" in text  # ratios
    assert " TB " in text or " GB " in text  # bytes from tertiary storage
    assert "{" not in text


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


def test_a_sweep_gives_policy_options_to_the_policies_that_take_them(tmp_path: Path) -> None:
    args = ["sweep", "--policies", "farm,delayed", "--period-h", "12", "--loads", "0.3"]
    result = runner.invoke(app, [*args, "--jobs", "60", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    with (tmp_path / "o" / "sweep.csv").open(newline="") as fh:
        waits = {r["policy"]: float(r["mean_wait_s"]) for r in csv.DictReader(fh)}
    assert waits["delayed"] > 3 * 3600 > waits["farm"]


def test_policies_lists_the_policies() -> None:
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    for name in ("farm", "splitting", "cache-splitting", "out-of-order"):
        assert name in result.stdout
    assert "§3.1" in result.stdout  # the paper section of the processing farm


def test_policies_at_80_columns_keeps_each_name_and_parameter_whole() -> None:
    from datasched.cli.info import _shown
    from datasched.policies.registry import available

    result = runner.invoke(app, ["policies"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = {w for line in lines for w in line.split()}
    for name, cls in available().items():
        assert name in words
        for p in cls.params:
            shown = f"{p.name}={_shown(p.default)}"
            if " " in shown:  # prose (the default performance map's description) wraps
                shown = shown.split()[0]
            assert shown in words, shown  # NAME=VALUE whole, as -P takes it


def test_sweep_writes_csv_and_png(tmp_path: Path) -> None:
    out = tmp_path / "new" / "sweep"
    args = ["sweep", "--policies", "farm,cache-splitting", "--loads", "0.2,0.6"]
    args += ["--cache-gb", "50", "--cache-gb", "100", "--jobs", "60", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with (out / "sweep.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # farm x 2 loads (its results do not depend on the cache), cache-splitting x 2 caches x 2
    assert len(rows) == 2 + 2 * 2
    assert set(rows[0]) >= SIM_KEYS
    assert {(r["policy"], r["cache_gb"]) for r in rows} == {
        ("farm", "50.0"),
        ("cache-splitting", "50.0"),
        ("cache-splitting", "100.0"),
    }
    png = (out / "sweep.png").read_bytes()
    assert png[:8] == PNG_MAGIC
    assert len(png) > 10_000
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.png"]
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["sweep"]  # no temporary left
    assert str(out / "sweep.png") in result.stdout.replace("\n", "")


def test_sweep_into_an_existing_directory_replaces_its_files(tmp_path: Path) -> None:
    (tmp_path / "sweep.csv").write_text("old\n")
    (tmp_path / "keep.txt").write_text("mine\n")
    args = ["sweep", "--policies", "farm", "--loads", "0.3:0.9:3", "--jobs", "40"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "sweep.csv").read_text().splitlines()) == 1 + 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "sweep.csv", "sweep.png"]


def test_sweep_where_every_run_overloads_still_draws(tmp_path: Path) -> None:
    args = ["sweep", "--policies", "farm", "--loads", "20,30", "--jobs", "60"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o" / "sweep.png").read_bytes()[:8] == PNG_MAGIC


def test_a_failed_sweep_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(cli_sim, "plot_sweep", broken)
    out = tmp_path / "a" / "b"
    args = ["sweep", "--policies", "farm", "--loads", "0.5", "--jobs", "40", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert list(tmp_path.iterdir()) == []  # neither the directory nor its parents


@pytest.mark.parametrize(
    "command",
    [["sweep", "--policies", "farm", "--loads", "0.5"], ["perf-map"], ["demo-sim"]],
)
def test_processes_must_be_positive(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "o"
    result = runner.invoke(app, [*command, "-j", "0", "--out", str(out)])
    assert result.exit_code == 2
    assert "--processes: must be at least 1, got 0" in result.output
    assert not out.exists()


def _rows_without_wall(csv_path: Path) -> list[dict[str, str]]:
    with csv_path.open(newline="") as fh:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(fh)]


def test_a_sweep_on_a_dask_cluster_writes_what_a_local_one_does(
    tmp_path: Path, dask_cluster: Any
) -> None:
    args = ["sweep", "--policies", "farm,cache-splitting", "--loads", "0.3,0.9", "--jobs", "60"]
    local = runner.invoke(app, [*args, "-j", "1", "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    address = dask_cluster.scheduler_address
    remote = runner.invoke(app, [*args, "--scheduler", address, "--out", str(tmp_path / "dask")])
    assert remote.exit_code == 0, remote.output
    rows = _rows_without_wall(tmp_path / "dask" / "sweep.csv")
    assert rows == _rows_without_wall(tmp_path / "local" / "sweep.csv")
    assert len(rows) == 4
    assert (tmp_path / "dask" / "sweep.png").read_bytes()[:8] == PNG_MAGIC


def test_a_performance_map_on_a_dask_cluster_is_the_local_one(
    tmp_path: Path, dask_cluster: Any
) -> None:
    args = ["perf-map", "--periods-h", "0", "--stripes", "5000", "--caches-gb", "50,100"]
    args += ["--nodes", "3", "--jobs", "30"]
    local = runner.invoke(app, [*args, "-j", "1", "--out", str(tmp_path / "local.json")])
    assert local.exit_code == 0, local.output
    address = dask_cluster.scheduler_address
    remote = runner.invoke(app, [*args, "--scheduler", address, "--out", str(tmp_path / "d.json")])
    assert remote.exit_code == 0, remote.output
    pmap = json.loads((tmp_path / "d.json").read_text())
    assert pmap == json.loads((tmp_path / "local.json").read_text())
    assert len(pmap["points"]) == 2


SIMULATING_COMMANDS = [
    ["sweep", "--policies", "farm", "--loads", "0.5"],
    ["perf-map"],
    ["demo-sim"],
    ["reproduce", "ponce", "--quick"],
]


@pytest.mark.parametrize("command", SIMULATING_COMMANDS, ids=lambda c: c[0])
def test_an_unreachable_scheduler_is_one_line_exit_2_nothing_written(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 0.5)
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    out = tmp_path / "o"
    result = runner.invoke(app, [*command, "--scheduler", address, "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --scheduler: ")
    assert address in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert not out.exists()


def test_a_malformed_scheduler_address_is_one_line_exit_2(tmp_path: Path) -> None:
    args = ["sweep", "--policies", "farm", "--loads", "0.5", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, "--scheduler", "head:port"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --scheduler: 'head:port' is not a scheduler address")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", SIMULATING_COMMANDS, ids=lambda c: c[0])
def test_processes_and_scheduler_together_are_refused(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "o"
    args = [*command, "-j", "2", "--scheduler", "tcp://127.0.0.1:8786", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --processes: not with --scheduler (the cluster's workers decide how many "
        "simulations run at once)"
    )
    assert not out.exists()


def test_max_load_json(tmp_path: Path) -> None:
    args = ["max-load", "--policy", "farm", "--jobs", "40", "--nodes", "2", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data["max_load_jobs_per_h"], float)
    assert data["max_load_jobs_per_h"] > 0
    assert data["policy"] == "farm"
    assert data["n_nodes"] == 2
    assert data["n_jobs"] == 40
    assert {"cache_gb", "pipeline", "seed", "warmup_fraction", "min_subjob_events"} <= set(data)
    assert data["probes"]
    assert all(set(p) == {"load_jobs_per_h", "n_jobs", "overloaded"} for p in data["probes"])
    # The bracket: the answer is the highest load sustained, below the lowest overloaded,
    # and a run of confirm_factor times the jobs judged it.
    assert data["highest_sustained_jobs_per_h"] == data["max_load_jobs_per_h"]
    assert data["lowest_overloaded_jobs_per_h"] > data["max_load_jobs_per_h"]
    assert data["confirm_jobs"] == 40 * data["confirm_factor"]
    assert {
        "load_jobs_per_h": data["max_load_jobs_per_h"],
        "n_jobs": data["confirm_jobs"],
        "overloaded": False,
    } in data["probes"]


def test_max_load_confirm_factor_one_runs_no_longer_probe() -> None:
    args = ["max-load", "--jobs", "40", "--nodes", "2", "--confirm-factor", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["confirm_jobs"] == 40
    assert {p["n_jobs"] for p in data["probes"]} == {40}


def test_max_load_prints_its_probes_on_stderr() -> None:
    result = runner.invoke(app, ["max-load", "--jobs", "40", "--nodes", "2"])
    assert result.exit_code == 0, result.output
    assert "probe" in result.stderr
    assert "jobs/h" in result.stderr
    assert "maximal sustainable load" in result.stdout
    assert "probe" not in result.stdout
    assert "highest sustained" in result.stdout
    assert "lowest overloaded" in result.stdout


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
    args = ["trace", "generate", "--out", str(path), "--jobs", "50", "--load", "0.8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["trace", "show", str(path)])
    assert result.exit_code == 0
    assert "50 jobs" in result.stdout
    result = runner.invoke(app, ["sim", "--trace", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["jobs_measured"] > 0
    assert 0.5 < data["load_jobs_per_h"] < 1.3  # the trace's own arrival rate, not --load


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "--policy", "nope"], "--policy: unknown policy 'nope'"),
        (["sim", "--load", "-1"], "--load: must be a positive number"),
        (["sim", "--nodes", "0"], "--nodes: must be a positive number"),
        (["sim", "--jobs", "0"], "--jobs: must be a positive number"),
        (["sim", "--cache-gb", "-5"], "--cache-gb: must be zero or positive"),
        (["sim", "--min-subjob", "0"], "--min-subjob: must be a positive number"),
        (["sim", "--warmup", "1.5"], "--warmup: must be in [0, 1)"),
        (["sim", "--pipeline", "sideways", "--json"], "--pipeline: 'sideways' is not one of"),
        (["sim", "--load", "fast"], "--load: expected a number"),
        (["sim", "--jobs", "many"], "--jobs: expected an integer"),
        (["sim", "--colour", "red"], "No such option: --colour"),
        (["sim", "--trace", "no/such/file.csv"], "file.csv: cannot be read"),
        (["max-load", "--policy", "nope", "--json"], "--policy: unknown policy"),
        (["max-load", "--nodes", "-2"], "--nodes: must be a positive number"),
        (["max-load", "--confirm-factor", "0"], "--confirm-factor: must be at least 1"),
        (["sweep", "--loads", "a,b"], "--loads: expected a comma list"),
        (["sweep", "--loads", "0.1:1.5"], "--loads: expected a comma list"),
        (["sweep", "--loads", "0.1:1.5:0"], "--loads: expected a comma list"),
        (["sweep", "--loads", ","], "--loads: no values given"),
        (["sweep", "--loads", "0.5,-1"], "--loads: must be a positive number"),
        (["sweep", "--policies", "farm,nope"], "--policies: unknown policy 'nope'"),
        (["sweep", "--cache-gb", "100,-5"], "--cache-gb: must be zero or positive"),
        (["sweep", "--nodes", "0"], "--nodes: must be a positive number"),
        (["sweep", "--pipeline", "sideways"], "--pipeline: 'sideways' is not one of"),
        (["trace", "generate", "--jobs", "0"], "--jobs: must be a positive integer"),
        (["trace", "generate", "--load", "0"], "--load: must be a positive number"),
        (["sim", "-p", "out-of-order", "-P", "colour=3"], "-P colour: policy 'out-of-order' has"),
        (["sim", "-P", "unknown=1"], "-P unknown: policy 'farm' has no such parameter"),
        (["sim", "-p", "farm", "--period-h", "3"], "--period-h: policy 'farm' takes no such"),
        (["sim", "-p", "delayed", "--stripe-events", "0"], "--stripe-events: must be at least 1"),
        (["sim", "-p", "delayed", "--stripe-events", "many"], "--stripe-events: expected a whole"),
        (["sim", "-p", "delayed", "-P", "period_h=soon"], "-P period_h: expected a number"),
        (["sim", "--slots", "0"], "--slots: must be a positive number"),
        (["sim", "--file-gb", "-1"], "--file-gb: must be zero or positive"),
        (["sim", "--node-mtbf-h", "-1"], "--node-mtbf-h: must be a positive number"),
        (["sim", "--node-mtbf-h", "5", "--node-repair-h", "-1"], "--node-repair-h: must be"),
        (["sim", "--replicate-hot", "0"], "--replicate-hot: must be at least 1"),
        (["sweep", "--slots", "0"], "--slots: must be a positive number"),
        (["max-load", "--slots", "0"], "--slots: must be a positive number"),
        (
            ["sim", "-p", "adaptive-delay", "--performance-map", "no/such/map.json"],
            "--performance-map: no/such/map.json",
        ),
        (["max-load", "-p", "splitting", "--fairness-h", "2"], "--fairness-h: policy 'splitting'"),
        (["sweep", "--policies", "farm", "--fairness-h", "2"], "--fairness-h: none of the"),
        (["sim", "-p", "out-of-order", "--replicate-after", "0"], "--replicate-after: must be"),
        (["sim", "-p", "out-of-order", "-P", "fairness_h=-1"], "-P fairness_h: must be above 0"),
        (["sim", "-p", "out-of-order", "-P", "fairness_h=soon"], "expected a number"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    if args[0] == "sweep":
        args = [*args, "--out", str(out), "--jobs", "40"]
    elif args[:2] == ["trace", "generate"]:
        args = [*args, "--out", str(out / "t.csv")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "--trace", "T", "--load", "2"], "--load: not with --trace"),
        (["sim", "--trace", "T", "--jobs", "30"], "--jobs: not with --trace"),
        (["sim", "--trace", "T", "--seed", "3"], "--seed: not with --trace unless --node-mtbf-h"),
        (
            ["sim", "-p", "out-of-order", "--replicate-after", "3", "-P", "replication=false"],
            "--replicate-after: sets replication=true, not with -P replication=false",
        ),
        (
            ["sim", "-p", "out-of-order", "-P", "replicate_after=3", "-P", "replication=false"],
            "-P replicate_after: sets replication=true, not with -P replication=false",
        ),
        (
            ["sim", "-p", "out-of-order", "--fairness-h", "3", "-P", "fairness_h=4"],
            "-P fairness_h: not with --fairness-h",
        ),
        (
            ["sim", "-p", "out-of-order", "-P", "fairness_h=3", "-P", "fairness_h=4"],
            "-P fairness_h: not with -P fairness_h=3",
        ),
        (["sim", "--node-repair-h", "3"], "--node-repair-h: only with --node-mtbf-h"),
        (["sweep", "--node-repair-h", "3"], "--node-repair-h: only with --node-mtbf-h"),
        (
            ["sweep", "--policies", "farm,splitting", "--cache-gb", "50,100"],
            "--cache-gb: 2 sizes, but none of the policies swept (farm, splitting) uses a cache",
        ),
        (
            [
                "sweep",
                "--policies",
                "out-of-order",
                "--replicate-after",
                "2",
                "-P",
                "replication=0",
            ],
            "--replicate-after: sets replication=true, not with -P replication=0",
        ),
        (["scale", "--policy", "JobRandom", "--load", "2"], "--load: not with --policy JobRandom"),
        (
            ["scale", "--policy", "JobRandom", "--cache-gb", "5"],
            "--cache-gb: not with --policy JobRandom",
        ),
    ],
)
def test_an_option_another_one_overrides_is_refused(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    """One option that another makes meaningless, given anyway, would be silently ignored:
    refused in one line naming both, exit 2, nothing run or written."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,start_event,n_events\n0,0,0,100\n1,60,100,100\n")
    out = tmp_path / "out"
    args = [str(trace) if a == "T" else a for a in args]
    if args[0] == "sweep":
        args = [*args, "--out", str(out), "--jobs", "20", "--loads", "0.5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert not out.exists()


def test_options_that_agree_are_taken(tmp_path: Path) -> None:
    """What the refusals above leave alone: the seed with a trace draws node failures, the
    same value twice is no conflict, repair times come with failure times."""
    trace = tmp_path / "t.csv"
    rows = [f"{i},{600 * i},{1000 * i},2000" for i in range(30)]
    trace.write_text("job_id,submit_s,start_event,n_events\n" + "\n".join(rows) + "\n")
    for args in (
        ["--trace", str(trace), "--seed", "3", "--node-mtbf-h", "100"],
        ["-p", "out-of-order", "--replicate-after", "3", "-P", "replication=true", "--jobs", "30"],
        ["--node-mtbf-h", "100", "--node-repair-h", "2", "--jobs", "30"],
    ):
        result = runner.invoke(app, ["sim", *args, "--json"])
        assert result.exit_code == 0, (args, result.output)


def test_malformed_trace_names_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_s,start_event,n_events\n0,1.0,10,100\n1,2.0,20,-3\n")
    expected = "error: bad.csv line 3: field 'n_events': must be a positive integer, got '-3'\n"
    for args in (["sim", "--trace", str(path), "--json"], ["trace", "show", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        assert result.stderr == expected
        assert result.stdout == ""


def test_an_output_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("not a directory\n")
    args = ["sweep", "--policies", "farm", "--loads", "0.5", "--jobs", "40", "--out", str(target)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --out: ")
    assert "not a directory" in result.stderr
    assert target.read_text() == "not a directory\n"


def test_version(monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    version, hot_path = result.stdout.strip().splitlines()
    assert version == f"datasched {__version__}"
    assert hot_path.startswith("simulator hot path: ")
    monkeypatch.setenv("DATASCHED_PURE", "1")
    result = runner.invoke(app, ["--version"])
    assert result.stdout.strip().splitlines()[1] == (
        "simulator hot path: from its sources (DATASCHED_PURE is set)"
    )


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["sim"],
        ["max-load"],
        ["sweep"],
        ["scale"],
        ["policies"],
        ["trace"],
        ["trace", "generate"],
        ["trace", "show"],
        ["reproduce", "ponce"],
        ["demo-sim"],
    ],
)
def test_help_explains(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert len(result.stdout) > 200
    if command in (["sim"], ["max-load"], ["sweep"]):
        assert "GB" in result.stdout
        assert "default" in result.stdout.lower()


@pytest.mark.slow
def test_demo_sim_json(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo-sim", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["runs"]) == 3 * 4
    assert {r["policy"] for r in data["runs"]} == {"farm", "splitting", "cache-splitting"}
    assert Path(data["plot"]).read_bytes()[:8] == PNG_MAGIC
    assert len((out / "sweep.csv").read_text().splitlines()) == 1 + 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-P", "bogus=1"], "bogus"),
        (["-P", "replication=maybe"], "replication"),
        (["--policy", "nope"], "nope"),
    ],
)
def test_demo_rejects_bad_policy_settings_before_starting(
    tmp_path: Path, args: list[str], message: str
) -> None:
    data, out = tmp_path / "data", tmp_path / "run"
    result = runner.invoke(app, ["demo", "--data", str(data), "--out", str(out), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not data.exists()
    assert not out.exists()


# -- options built from the policies' declarations -----------------------------------------


def test_named_policy_options_mean_the_same_as_their_param(tmp_path: Path) -> None:
    base = ["sim", "-p", "out-of-order", "--jobs", "150", "--json"]
    named = runner.invoke(app, [*base, "--fairness-h", "0.5", "--replicate-after", "2"])
    assert named.exit_code == 0, named.output
    generic = runner.invoke(app, [*base, "-P", "fairness_h=0.5", "-P", "replicate_after=2"])
    assert generic.exit_code == 0, generic.output
    a, b = json.loads(named.stdout), json.loads(generic.stdout)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    # Giving replicate_after turned replication on: peers' caches are read.
    assert a["peer_read_ratio"] > 0


def test_every_declared_parameter_has_its_option_and_its_json() -> None:
    from datasched.policies import available

    help_text = runner.invoke(app, ["sim", "--help"], env={"COLUMNS": "200"}).stdout
    result = runner.invoke(app, ["policies", "--json"])
    assert result.exit_code == 0, result.output
    described = {p["name"]: p for p in json.loads(result.stdout)["policies"]}
    assert list(described) == list(available())
    for name, cls in available().items():
        params = {p["name"]: p for p in described[name]["params"]}
        assert set(params) == {p.name for p in cls.params}
        for p in cls.params:
            assert params[p.name]["help"] == p.help
            if p.option:
                assert p.flag in help_text, p.flag
    fairness = {p["name"]: p for p in described["out-of-order"]["params"]}["fairness_h"]
    assert fairness["type"] == "float"
    assert fairness["default"] == 48.0
    assert fairness["minimum"] == 0.0
    assert fairness["minimum_exclusive"] is True


def test_slots_files_and_faults_reach_the_simulation() -> None:
    args = ["sim", "-p", "cache-splitting", "--jobs", "200", "--json"]
    args += ["--slots", "2", "--file-gb", "5", "--node-mtbf-h", "100", "--node-repair-h", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["n_slots"] == 20
    assert data["file_gb"] == 5.0
    assert data["node_failures"] > 0
    assert data["jobs_completed"] == 200
    assert data["events_processed"] == data["events_submitted"] > 0


def test_replicate_hot_reaches_the_simulation() -> None:
    args = ["sim", "-p", "out-of-order", "--jobs", "40", "--file-gb", "5", "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)
    result = runner.invoke(app, [*args, "--replicate-hot", "2"])
    assert result.exit_code == 0, result.output
    hot = json.loads(result.stdout)
    assert plain["replications"] == 0 < hot["replications"]
    assert hot["jobs_completed"] == plain["jobs_completed"] == 40
    assert hot["events_processed"] == hot["events_submitted"] == plain["events_submitted"]


def test_the_service_demos_table_keeps_each_state_whole_at_80_columns() -> None:
    from rich.console import Console

    from datasched.cli.demo_service import _table

    row = {
        "user": "ann",
        "group": "physics",
        "form": "yaml",
        "title": "dimuon mass, all of zmumu",
        "id": "x",
        "state": "completed",
        "jobs": 10,
        "events": 200_000,
        "events_total": 200_000,
        "eta": {"error_at_submission_s": -9.8},
    }
    console = Console(width=80, record=True)
    console.print(_table([row]))
    text = console.export_text()
    assert "completed" in text.split()
    assert "-9.8 s" in text  # the first ETA less the real finish
    assert "first ETA less" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_run_summary_keeps_every_figure_whole_at_80_columns() -> None:
    """`datasched run`'s table of jobs on an 80-column terminal: the events column was cut
    to "60,000/60,…" under the full frame."""
    from rich.console import Console

    from datasched.cli.runtime import jobs_table
    from datasched.runtime.reports import JobReport, RunReport

    jobs = [
        JobReport(
            "dimuon-mass-of-the-whole-zmumu-dataset",
            12_345_678,
            12_345_678,
            wall_s=1234.5,
            wait_s=321.0,
            cache_hit_ratio=0.77,
            bytes_from_tertiary=987_654_321,
            status="completed",
        ),
        JobReport("zpeak-2", 60_000, 1_234, status="failed"),
    ]
    report = RunReport("out-of-order", 1.2, jobs, [])
    console = Console(width=80, record=True)
    console.print(jobs_table(report, "out-of-order: 2 jobs"))
    text = console.export_text()
    assert "…" not in text
    assert "12,345,678/12,345,678" in text
    assert "1,234/60,000" in text
    assert "1234.5 s" in text
    assert "988 MB" in text
    assert "completed" in text.split()
    assert "failed" in text.split()
    assert max(len(line) for line in text.splitlines()) <= 80


def test_sweep_takes_policy_parameters_for_the_policies_that_have_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-P NAME=VALUE` as the README and docs/policies.md promise for sweep: it goes to
    the swept policies that take the parameter, as a named option does."""
    import datasched.cli.sim as cli_sim

    seen: list[Any] = []

    def capture(configs: Any, **_: Any) -> Any:
        seen.extend(configs)
        raise SystemExit(0)

    monkeypatch.setattr(cli_sim, "run_all", capture)
    base = ["sweep", "--loads", "0.5", "--jobs", "20", "--out", str(tmp_path / "o")]
    r = runner.invoke(
        app, [*base, "--policies", "farm,cache-splitting", "-P", "fill_duplicates=false"]
    )
    assert r.exit_code == 0, r.output
    by_policy = {c.policy: c.policy_params for c in seen}
    assert by_policy["cache-splitting"]["fill_duplicates"] is False
    assert "fill_duplicates" not in by_policy["farm"]
    r = runner.invoke(app, [*base, "--policies", "farm", "-P", "fill_duplicates=false"])
    assert r.exit_code == 2
    assert "-P fill_duplicates: none of the policies swept takes it" in r.output
    r = runner.invoke(app, [*base, "--policies", "cache-splitting", "-P", "fill_duplicates=maybe"])
    assert r.exit_code == 2
    assert "fill_duplicates" in r.output


def test_the_ponce_reproduction_prints_each_claim_as_its_report_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's table showed 32,000 s as "3.2e+04" beside the paper's "32000", without
    units, and an unmeasured claim as "nan"; the report wrote "32,000 s" and "not
    measured". Both now show the report's cells."""
    from datasched.studies.claims import Claim
    from datasched.studies.ponce import reproduce

    claims = [
        Claim("single", "§3.4", "single job time", 32000.0, 32012.0, "s", 0.01),
        Claim("wait", "§5", "worst wait", 1.5, float("nan"), "days", 0.1, bound="at_most"),
    ]
    monkeypatch.setattr(reproduce, "run_ponce", lambda **kw: (claims, []))
    out = tmp_path / "repro"
    result = runner.invoke(app, ["reproduce", "ponce", "-j", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    assert "| 32,000 s | 32,012 s | yes |" in report
    assert "| ≤ 1.5 days | not measured | - |" in report
    rows = [" ".join(line.strip("│ ").split()) for line in result.stdout.splitlines()]
    assert any("32,000 s │ 32,012 s │ yes" in r for r in rows), result.stdout
    assert any("≤ 1.5 days │ not measured │ -" in r for r in rows), result.stdout
    assert "e+0" not in result.stdout
    assert "nan" not in result.stdout


def test_a_quick_ponce_reproduction_says_so_in_its_report_and_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its runs stood in for (tests/studies/test_paper_ponce.py runs them): what is checked
    is what the command says of a --quick run, at the report's top and under its table."""
    from datasched.studies.claims import Claim
    from datasched.studies.ponce import reproduce

    def runs(**kw: Any) -> Any:
        return [Claim("k", "§3", "a ratio", 0.7, 0.7, "", 0.1)], []

    monkeypatch.setattr(reproduce, "run_ponce", runs)
    out = tmp_path / "repro"
    args = ["reproduce", "ponce", "--quick", "-j", "1", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    words = " ".join(result.stdout.split())  # the title wraps to the table's width
    assert "ponce-hersch: paper vs datasched (quick run: reduced sizes)" in words
    assert "quick run (--quick): reduced sizes" in result.stdout
    report = (out / "report.md").read_text()
    assert report.split("\n\n")[1].startswith("**Quick run** (`datasched reproduce ponce --quick`)")
    result = runner.invoke(app, ["reproduce", "ponce", "-j", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "quick run" not in " ".join(result.stdout.split())
    assert "Quick run" not in (out / "report.md").read_text()
