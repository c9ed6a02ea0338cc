"""``datasched request check``: a request checked offline, its errors or its jobs printed."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert "error: input[0].path:" in result.stderr and "error: command:" in result.stderr
