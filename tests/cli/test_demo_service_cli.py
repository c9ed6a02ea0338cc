"""``datasched demo-service``'s own output, with the scene itself stood in (the scene runs in
``tests/service``): the final table once without a terminal, ETA errors with the sign the
JSON has, and one line saying how to get the screenshot when it cannot be taken."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.cli.demo_service import _table

runner = CliRunner()


def _row(state: str, eta: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "user": "ann",
        "group": "g",
        "form": "yaml",
        "id": "r1",
        "title": "dimuons",
        "state": state,
        "jobs": 2,
        "events": 100,
        "events_total": 100,
        "eta": eta,
    }


ENDED = {"seconds_left": None, "actual_finish": 100.0, "error_at_submission_s": -10.12}


def _rendered(table: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_the_table_signs_eta_errors_as_the_json_does() -> None:
    """Predicted minus actual: a request that ended 10.12 s after its first ETA is -10.1."""
    text = _rendered(_table([_row("completed", ENDED)]))
    assert "-10.1 s" in text
    assert "+10.1" not in text
    late = _rendered(_table([_row("completed", {**ENDED, "error_at_submission_s": 3.0})]))
    assert "+3.0 s" in late
    assert "first ETA less the real finish" in text


def test_the_final_table_fits_80_columns_legibly() -> None:
    """The demo's three requests at 80 columns: it was cramped there (each title wrapped
    over four lines, figures cut in two). Every line fits, the headers are one line, every
    figure is whole, a title takes two lines at most, and the caption says the units; a
    command's request counts no events (a dash, not 0 / 0)."""
    from rich.console import Console

    rows = [
        {
            **_row("running", {"seconds_left": 123.4}),
            "title": "dimuon mass, all of zmumu",
            "jobs": 4,
            "events": 123_456,
            "events_total": 400_000,
        },
        {
            **_row("completed", {**ENDED, "error_at_submission_s": 0.53}),
            "user": "bob",
            "group": "physics",
            "form": "xml",
            "title": "dimuon, first files",
            "events": 200_000,
            "events_total": 200_000,
        },
        {
            **_row("completed", None),
            "user": "cy",
            "group": "heavy-ion",
            "form": "xml",
            "title": "count files",
            "jobs": 1,
            "kind": "command",
            "events": None,
            "events_total": None,
        },
    ]
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(_table(rows))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    head = next(i for i, line in enumerate(lines) if "user" in line)
    headers = ["user", "group", "form", "request", "state", "jobs", "events", "ETA"]
    assert lines[head].split() == headers
    body = "\n".join(lines)
    for figure in ("123,456/400,000", "123 s", "200,000", "+0.5 s"):
        assert figure in body, figure
    starts = [i for i, line in enumerate(lines) if line.split()[:1] in (["ann"], ["bob"], ["cy"])]
    assert len(starts) == 3
    rule = head + 1
    assert starts[0] == rule + 1
    assert starts[1] - starts[0] <= 2  # a title over two lines at most
    assert starts[2] - starts[1] <= 2
    cy = lines[starts[2]].split()
    assert cy[-2:] == ["-", "-"]  # no events counted, no ETA
    assert "0/0" not in body
    assert "seconds left" in body  # the units the cells leave out


def test_without_a_terminal_the_final_table_is_printed_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import datasched.service.demo as demo

    data = tmp_path / "data"
    data.mkdir()
    (data / "catalog.yaml").write_text("datasets: {}\n")

    def scene(out_dir: Path, data_dir: Path, **kw: Any) -> dict[str, Any]:
        if kw.get("on_progress") is not None:  # a live view would draw these
            kw["on_progress"]([_row("running", None)])
        return {
            "elapsed_s": 1.0,
            "policy": kw["policy"],
            "requests": [_row("completed", ENDED)],
            "screenshot": None,
            "screenshot_missing": f"no screenshot: no Chromium found: {demo.SCREENSHOT_HINT}",
        }

    monkeypatch.setattr(demo, "run_service_demo", scene)
    result = runner.invoke(app, ["demo-service", "--data", str(data), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("dimuons") == 1  # one table, not the live view's last too
    assert result.output.count("apt install chromium") == 1
    assert "running" not in result.output


def test_the_screenshot_says_how_to_get_it_without_chromium(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("playwright")
    import datasched.service.dashboard.shot as shot
    from datasched.service.demo import _screenshot

    monkeypatch.setattr(shot, "chromium_path", lambda: None)
    path, why = _screenshot(Any, tmp_path / "dashboard.png")  # type: ignore[arg-type]
    assert path is None
    assert why is not None
    assert "apt install chromium" in why
    assert "\n" not in why
