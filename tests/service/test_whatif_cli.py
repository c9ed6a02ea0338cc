"""``datasched whatif --snapshot``: a table or JSON per policy; bad input named, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from service.whatif_support import cached_on_second_node, mixed

runner = CliRunner()


def _file(tmp_path: Path, data: object) -> str:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_whatif_json_from_a_snapshot(tmp_path: Path) -> None:
    path = _file(tmp_path, cached_on_second_node().as_dict())
    args = ["whatif", "--policy", "farm", "-p", "out-of-order", "--snapshot", path]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    eta = doc["requests"][0]["eta_s"]
    assert eta["out-of-order"] < eta["farm"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "makespan" in table.stdout
    assert "out-of-order" in table.stdout
    assert "r1" in table.stdout


def test_whatif_table_names_every_request(tmp_path: Path) -> None:
    path = _file(tmp_path, mixed().as_dict())
    result = runner.invoke(app, ["whatif", "--policy", "farm", "--snapshot", path])
    assert result.exit_code == 0, result.output
    assert all(r in result.stdout for r in ("r1", "r2", "r3"))


def test_whatif_bad_input_exits_2_naming_it(tmp_path: Path) -> None:
    data = mixed().as_dict()
    data["jobs"][1]["node"] = "w9"
    path = _file(tmp_path, data)
    result = runner.invoke(app, ["whatif", "--policy", "farm", "--snapshot", path])
    assert result.exit_code == 2
    assert "jobs[1].node" in result.stderr
    good = _file(tmp_path, mixed().as_dict())
    result = runner.invoke(app, ["whatif", "--policy", "nope", "--snapshot", good])
    assert result.exit_code == 2
    assert "--policy" in result.stderr
    result = runner.invoke(app, ["whatif", "--policy", "farm"], env={"DATASCHED_SERVER": None})
    assert result.exit_code == 2
    assert "--snapshot or --server" in result.stderr
    # As every command against a server, it takes the server from the environment.
    at = {"DATASCHED_SERVER": "http://127.0.0.1:9", "DATASCHED_TOKEN": "ds_x_y"}
    result = runner.invoke(app, ["whatif", "--policy", "farm"], env=at)
    assert result.exit_code == 1
    assert "cannot reach" in result.stderr
    result = runner.invoke(
        app, ["whatif", "-p", "farm", "--snapshot", good, "--server", at["DATASCHED_SERVER"]]
    )
    assert result.exit_code == 2
    assert "not both" in result.stderr
    missing = str(tmp_path / "none.json")
    result = runner.invoke(app, ["whatif", "--policy", "farm", "--snapshot", missing])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr
    (tmp_path / "junk.json").write_text("{")
    result = runner.invoke(app, ["whatif", "-p", "farm", "--snapshot", str(tmp_path / "junk.json")])
    assert result.exit_code == 2
    assert "not JSON" in result.stderr
    result = runner.invoke(app, ["whatif", "-p", "farm", "--server", "ftp://x"])
    assert result.exit_code == 2
    assert "--server" in result.stderr


def test_whatif_server_unreachable_exits_1() -> None:
    result = runner.invoke(app, ["whatif", "-p", "farm", "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach" in result.stderr


def test_whatif_sets_policy_parameters_as_sweep_does(tmp_path: Path) -> None:
    """`-P NAME=VALUE` goes to every --policy that takes it; the table says what was set."""
    path = _file(tmp_path, mixed().as_dict())
    base = ["whatif", "-p", "farm", "-p", "mincostflow", "--snapshot", path, "--json"]
    plain = json.loads(runner.invoke(app, base).stdout)["makespan_s"]
    result = runner.invoke(app, [*base, "-P", "lp_period_s=100"])
    assert result.exit_code == 0, result.output
    slow = json.loads(result.stdout)["makespan_s"]
    assert slow["mincostflow"] > plain["mincostflow"] + 99
    assert slow["farm"] == plain["farm"]
    table = runner.invoke(app, [*base[:-1], "-P", "lp_period_s=100"])
    assert "with lp_period_s=100" in " ".join(table.stdout.split())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-p", "farm", "-P", "lp_period_s=100"], "-P lp_period_s: none of the policies (farm)"),
        (["-p", "mincostflow", "-P", "lp_period_s=soon"], "-P lp_period_s: expected a number"),
        (["-p", "mincostflow", "-P", "lp_period_s"], "-P lp_period_s: expected NAME=VALUE"),
        (
            ["-p", "mincostflow", "-P", "lp_period_s=1", "-P", "lp-period-s=2"],
            "-P lp_period_s: given twice",
        ),
    ],
)
def test_whatif_bad_parameters_exit_2_naming_them(
    tmp_path: Path, args: list[str], says: str
) -> None:
    path = _file(tmp_path, mixed().as_dict())
    result = runner.invoke(app, ["whatif", *args, "--snapshot", path])
    assert result.exit_code == 2
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_whatif_sends_its_parameters_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --server, `-P` goes as the API's `param` (the server checks it, refusing a file
    it would have to read); what the server answers is shown as from a snapshot."""
    import io

    asked: list[str] = []
    answer = {"policies": ["mincostflow"], "makespan_s": {"mincostflow": 1.0}, "requests": []}

    def urlopen(req: Any, timeout: float) -> Any:
        asked.append(req.full_url)
        return io.BytesIO(json.dumps(answer).encode())

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    args = ["whatif", "-p", "mincostflow", "--server", "http://x", "-P", "lp_period_s=100"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert asked == ["http://x/api/v1/whatif?policy=mincostflow&param=lp_period_s%3D100"]
    assert "with lp_period_s=100" in result.stdout
