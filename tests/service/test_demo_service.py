"""The service's demo scene on a small dataset: three users' overlapping requests (YAML,
STAR's XML with a wildcard, a command) all complete, every event of each once, and the
summary is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the runtime extra is not installed")
pytest.importorskip("fastapi", reason="the service extra is not installed")

from datasched.runtime.demodata import write_demo_dataset
from datasched.service.demo import run_service_demo


def test_three_users_requests_complete_with_every_event_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_demo_dataset(data, n_events=4000, n_files=4, seed=2)
    seen: list[int] = []
    summary = run_service_demo(
        tmp_path / "out",
        data,
        workers=2,
        screenshot=False,
        tertiary_mb_s=None,
        on_progress=lambda rows: seen.append(len(rows)),
    )
    rows = {r["user"]: r for r in summary["requests"]}
    assert set(rows) == {"ann", "bob", "cy"}
    assert all(r["state"] == "completed" for r in rows.values()), rows
    assert rows["ann"]["events"] == rows["ann"]["events_total"] == 4000
    assert rows["bob"]["events"] == rows["bob"]["events_total"] == 2000  # half of the files
    assert rows["cy"]["form"] == "xml"
    assert rows["cy"]["jobs"] == 1
    assert seen
    assert all(n == 3 for n in seen)
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["id"] for r in written["requests"]] == [r["id"] for r in summary["requests"]]
