"""``datasched sim --check --trace-log`` and ``datasched trace story``: the trace is JSON lines
whose actions name the event that caused them, and the story of a job is drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from datasched.cli import app

runner = CliRunner()


def test_sim_writes_a_trace_and_story_reads_it(tmp_path: Path) -> None:
    log = tmp_path / "sched.jsonl"
    args = ["sim", "--policy", "out-of-order", "--nodes", "3", "--jobs", "20", "--check"]
    result = runner.invoke(app, [*args, "--trace-log", str(log), "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in log.read_text().splitlines()]
    events = {r["stimulus"]: r for r in records if r["kind"] == "event"}
    actions = [r for r in records if r["kind"] == "action"]
    assert sorted(events) == list(range(1, len(events) + 1))
    assert actions
    assert all(a["cause"] in events for a in actions)
    assert {r["to"] for r in records if r["kind"] == "transition"} >= {"queued", "running", "done"}

    story = runner.invoke(app, ["trace", "story", str(log), "--job", "3", "--json"])
    assert story.exit_code == 0, story.output
    told = json.loads(story.stdout)
    assert told[0]["type"] == "JobArrived"
    assert told[0]["job"] == 3
    assert any(r["kind"] == "action" and r["type"] == "JobCompleted" for r in told)
    text = runner.invoke(app, ["trace", "story", str(log), "--job", "3"])
    assert text.exit_code == 0
    assert "queued -> running on slot" in text.stdout


def test_story_refuses_what_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "event", "stimulus": 1}\nnot json\n')
    result = runner.invoke(app, ["trace", "story", str(bad), "--job", "0"])
    assert result.exit_code != 0
    assert "line 2: not JSON" in result.output
    missing = runner.invoke(app, ["trace", "story", str(bad.with_name("none")), "--job", "0"])
    assert missing.exit_code != 0
    assert "is not a file" in missing.output
    unknown = tmp_path / "one.jsonl"
    unknown.write_text('{"kind": "event", "stimulus": 1, "job": 0}\n')
    result = runner.invoke(app, ["trace", "story", str(unknown), "--job", "7"])
    assert result.exit_code != 0
    assert "job 7 is not in" in result.output


def test_trace_log_into_a_directory_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "--jobs", "5", "--trace-log", str(tmp_path)])
    assert result.exit_code != 0
    assert "--trace-log" in result.output
    assert "is a directory" in result.output
