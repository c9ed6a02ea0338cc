"""``datasched request check``: a request checked offline, its errors or its jobs printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app

runner = CliRunner()


def test_check_prints_the_elementary_jobs(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.root").write_bytes(b"x")
    req = tmp_path / "req.yaml"
    req.write_text(
        "command: ls $FILELIST\nmax_files_per_job: 2\ninputs: [{path: '*.root', machine: node0}]\n"
    )
    args = ["request", "check", str(req), "--roots", str(tmp_path), "--split", "by-host"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["files"] == 3
    assert [(j["node"], len(j["files"])) for j in doc["jobs"]] == [("node0", 2), ("node0", 1)]
    assert runner.invoke(app, args).exit_code == 0


def test_check_lists_every_error_with_exit_code_2(tmp_path: Path) -> None:
    req = tmp_path / "req.xml"
    req.write_text(
        '<job maxFilesPerProcess="0"><command>ls</command><input URL="file:/etc/passwd"/></job>'
    )
    result = runner.invoke(app, ["request", "check", str(req), "--json"])
    assert result.exit_code == 2
    assert [e["field"] for e in json.loads(result.stdout)["errors"]] == ["job.maxFilesPerProcess"]
    req.write_text('<job><command>ls | wc</command><input URL="file:/etc/passwd"/></job>')
    result = runner.invoke(app, ["request", "check", str(req), "--roots", str(tmp_path)])
    assert result.exit_code == 2
    # Each error names the file, then the field.
    assert f"error: {req}: input[0].path:" in result.stderr
    assert f"error: {req}: command:" in result.stderr


CATALOG = """datasets:
  auau2004:
    tree: Events
    metadata: {year: 2004, system: AuAu, keywords: [minbias]}
    files:
      - {url: auau/0.root, n_events: 100, n_bytes: 1000}
      - {url: auau/1.root, n_events: 50, n_bytes: 500}
  cucu2005:
    tree: Events
    metadata: {year: 2005, system: CuCu}
    files: [{url: cucu/0.root, n_events: 10, n_bytes: 100}]
"""


def test_catalog_queries_from_a_catalog_file(tmp_path: Path) -> None:
    from datasched.runtime.dataset import load_catalog
    from datasched.service.request import DatasetsCatalog

    (tmp_path / "catalog.yaml").write_text(CATALOG)
    catalog = DatasetsCatalog(load_catalog(tmp_path / "catalog.yaml"))
    assert [f.n_events for f in catalog.query("year=2004 system=AuAu")] == [100, 50]
    assert [f.dataset for f in catalog.query("minbias")] == ["auau2004", "auau2004"]
    assert catalog.query("dataset=cucu2005")[0].url == str(tmp_path / "cucu/0.root")
    assert catalog.query("year=2004 system=CuCu") == []
    assert catalog.file(str(tmp_path / "auau/1.root")) is not None
    with pytest.raises(ValueError, match="colour"):
        catalog.query("colour=red")

    req = tmp_path / "req.yaml"
    req.write_text(
        "processor: {name: 'ana:run', tree: Events}\n"
        "inputs: [{dataset: {query: year=2004 system=AuAu}}, {dataset: {query: colour=red}}]\n"
    )
    args = ["request", "check", str(req), "--catalog", str(tmp_path / "catalog.yaml"), "--json"]
    result = runner.invoke(app, [*args, "--roots", str(tmp_path)])
    assert result.exit_code == 2
    fields = [e["field"] for e in json.loads(result.stdout)["errors"]]
    assert fields == ["input[1].catalog", "processor"]  # and no module 'ana'


def test_a_processor_request_counts_events_and_loads_on_demand(tmp_path: Path) -> None:
    data = Path(__file__).parents[1] / "data"
    (tmp_path / "proc.py").write_text("def processor(events):\n    return len(events)\n")
    req = tmp_path / "req.xml"
    req.write_text(
        '<job><processor name="proc.py" tree="events"/>'
        f'<input URL="file:{data}/uproot-HZZ.root"/></job>'
    )
    args = ["request", "check", str(req), "--roots", str(tmp_path), "--roots", str(data)]
    result = runner.invoke(app, [*args, "--load", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"][0]["n_events"] == 2421
    req.write_text(req.read_text().replace('tree="events"', 'tree="nope"'))
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 2
    assert "no tree 'nope'" in json.loads(result.stdout)["errors"][0]["reason"]


def test_help_and_bad_options(tmp_path: Path) -> None:
    for command in (["request"], ["request", "check"]):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0
        assert "request" in result.stdout
    req = tmp_path / "r.yaml"
    req.write_text("command: ls\ninputs: [/a]\n")
    result = runner.invoke(app, ["request", "check", str(req), "--split", "sideways"])
    assert result.exit_code == 2
    assert "--split" in result.stderr
    result = runner.invoke(app, ["request", "check", str(tmp_path / "none.xml")])
    assert result.exit_code == 1
    assert "none.xml" in result.stderr
