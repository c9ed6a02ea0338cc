"""``datasched run --jobqueue slurm`` against a real Slurm (Debian's slurm-wlm and munge, a
controller and one node on loopback): the workers are Slurm jobs, and the results are those
of the embedded LocalCluster's run.

Skipped, with the reason, where Slurm is not installed or the test is not root, unless
``DATASCHED_REQUIRE_SLURM=1`` (then it fails instead). Slow (about 30 s): run it with
``pytest -m slow tests/runtime/test_slurm.py``.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from datasched.cli import app
from slurm_support import LoopbackSlurm, slurm_unavailable

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackSlurm]:
    pytest.importorskip("dask_jobqueue")
    reason = slurm_unavailable()
    if reason is not None:
        if os.environ.get("DATASCHED_REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = LoopbackSlurm()
    try:
        for key, value in cluster.env.items():
            monkeypatch.setenv(key, value)
        yield cluster
    finally:
        cluster.close()


def _jobs(tmp_path: Path, catalog: Path, out: str) -> Path:
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass", "dataset": "zmumu"},
        "jobs": [
            {"id": "all", "output": f"{out}/all.pkl"},
            {"id": "part", "events": [3000, 9000], "output": f"{out}/part.pkl"},
        ],
    }
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _counts(path: Path) -> list[float]:
    with path.open("rb") as f:
        result = pickle.load(f)
    return [float(x) for x in result["mass"].values()]


def test_slurm_workers_give_the_local_clusters_results(
    slurm: LoopbackSlurm, demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert slurm.sinfo() == "idle"
    assert slurm.jobs() == []
    local_jobs = _jobs(tmp_path, demo_catalog, "local")
    local = _run(
        ["run", str(local_jobs), "--workers", "2", "--cache-dir", str(tmp_path / "local-cache")]
    )
    batch_args = (
        "cores=1 memory=500MiB host=127.0.0.1 wait_s=60 "
        f"log_directory={tmp_path / 'logs'} worker_cache_dir={tmp_path / 'slurm-cache'}"
    )
    slurm_jobs = _jobs(tmp_path, demo_catalog, "slurm")
    batch = _run(
        ["run", str(slurm_jobs), "-w", "2", "--jobqueue", "slurm", "--jobqueue-args", batch_args]
    )
    for doc in (local, batch):
        assert [j["status"] for j in doc["jobs"]] == ["completed", "completed"]
        assert doc["events_processed"] == doc["events_expected"] == 12_000 + 6_000
    for name in ("all", "part"):
        assert _counts(tmp_path / "slurm" / f"{name}.pkl") == _counts(
            tmp_path / "local" / f"{name}.pkl"
        )
    # The workers were Slurm jobs (their logs), named stably, each with its own cache.
    assert sorted(p.name for p in (tmp_path / "slurm-cache").iterdir()) == [
        "datasched-slurm-0",
        "datasched-slurm-0.staging",
        "datasched-slurm-1",
        "datasched-slurm-1.staging",
    ]
    logs = list((tmp_path / "logs").glob("datasched-worker-*.err"))
    assert len(logs) == 2
    assert all("Starting Worker" in log.read_text() for log in logs)
    # The run cancelled its jobs when it closed the cluster.
    assert slurm.wait_until(lambda: not slurm.jobs(), timeout_s=30), slurm.jobs()
