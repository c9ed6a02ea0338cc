"""``datasched run`` for real analysts: skipping bad files, coffea-style chunking, a timeline
report, and one clear line for what cannot work."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from datasched.cli import app

runner = CliRunner()


def jobs_file(tmp_path: Path, jobs: list[dict[str, Any]], catalog: Path | None = None) -> Path:
    doc: dict[str, Any] = {
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
        "jobs": [{"output": f"out/{j['id']}.pkl", **j} for j in jobs],
    }
    if catalog is not None:
        doc["catalog"] = str(catalog)
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_skip_bad_files_runs_on_and_lists_them(tmp_path: Path, demo_catalog: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(demo_catalog.parent, data)
    files = sorted(data.glob("part-*.root"))
    path = jobs_file(
        tmp_path, [{"id": "j", "files": [str(f) for f in files[:3]], "tree": "Events"}]
    )
    # Corrupted after the jobs file is read: the packets find it (the run's own skip).
    size = files[1].stat().st_size
    base = ["run", str(path), "--workers", "2", "--cache-dir", str(tmp_path / "c"), "--json"]
    files[1].write_bytes(files[1].read_bytes()[: size // 2] + b"\0" * (size - size // 2))
    failed = runner.invoke(app, base)
    assert failed.exit_code == 1
    assert "error: job j: data error" in failed.stderr
    result = runner.invoke(app, [*base, "--skip-bad-files", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (job,) = doc["jobs"]
    per_file = job["events_expected"] // 3
    assert job["status"] == "completed"
    assert job["events_processed"] == 2 * per_file
    assert job["events_skipped"] == per_file
    assert [s["url"] for s in job["skipped_files"]] == [str(files[1])]
    assert [s["url"] for s in doc["skipped_files"]] == [str(files[1])]
    # Missing when the jobs file is read: left out then, and listed the same way.
    files[2].unlink()
    result = runner.invoke(app, [*base, "--skip-bad-files", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    skipped = {s["url"] for s in json.loads(result.stdout)["skipped_files"]}
    assert skipped == {str(files[1]), str(files[2])}


def test_chunksize_maxchunks_and_the_report(tmp_path: Path, demo_catalog: Path) -> None:
    path = jobs_file(tmp_path, [{"id": "j", "dataset": "zmumu"}], demo_catalog)
    report = tmp_path / "report"
    args = [
        "run",
        str(path),
        "--workers",
        "2",
        "--cache-dir",
        str(tmp_path / "c"),
        "--json",
        "--chunksize",
        "300",
        "--maxchunks",
        "5",
        "--report",
        str(report),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["events_processed"] == job["events_expected"] == 1500  # 5 chunks of 300
    assert (report / "timeline.png").stat().st_size > 0
    packets = (report / "packets.csv").read_text().splitlines()
    assert packets[0].endswith("bytes_read,cpu_s,t_start,t_end")
    assert len(packets) > 5
    sizes = [int(r.split(",")[4]) - int(r.split(",")[3]) for r in packets[1:]]
    assert max(sizes) <= 300  # --chunksize caps packets
    assert json.loads((report / "summary.json").read_text())["events_processed"] == 1500
    # PROOF's monitor: the packet table (the simulator's format), progress over time, plots.
    with (report / "monitor_packets.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(packets) - 1
    assert sum(int(r["events"]) for r in rows) == 1500
    assert {r["category"] for r in rows} <= {"local", "peer", "tertiary"}
    assert all(float(r["latency_s"]) >= 0 and float(r["processing_s"]) > 0 for r in rows)
    with (report / "progress.csv").open() as fh:
        progress = list(csv.DictReader(fh))
    assert {r["job"] for r in progress} == {"j", "all"}
    assert sum(float(r["events_per_s"]) for r in progress) > 0
    for png in ("progress.png", "packets.png"):
        assert (report / png).read_bytes().startswith(b"\x89PNG")


def test_what_cannot_work_is_one_line_and_exit_2(tmp_path: Path, demo_catalog: Path) -> None:
    path = jobs_file(tmp_path, [{"id": "j", "dataset": "zmumu"}], demo_catalog)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for extra, message in (
        (["--cache-dir", str(blocker / "cache")], "error: --cache-dir: cannot create"),
        (["--chunksize", "0"], "error: --chunksize: must be at least 1"),
        (["--maxchunks", "-1"], "error: --maxchunks: must be at least 1"),
        (["--report", str(blocker)], "error: --report: "),
    ):
        result = runner.invoke(app, ["run", str(path), "--workers", "1", *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert result.stderr.startswith(message)
        assert len(result.stderr.splitlines()) == 1
