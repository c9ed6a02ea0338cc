"""A coffea user's analysis, unchanged, on real ROOT files that datasched did not write (the
public HZZ ntuple and CMS NanoAOD sample in tests/data): the results equal coffea's own
Runner over the same files, bin by bin, under the processing farm, out-of-order and
cache-splitting, with a worker killed mid-run in one case. Plus coffea filesets, the
types of its accumulators, .coffea outputs, and reading only the branches used."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("coffea", reason="the coffea extra is not installed")

from coffea import processor, util
from coffea.nanoevents import BaseSchema, NanoAODSchema

from datasched.core.packets import PacketSizing
from datasched.runtime.jobspec import JobSpec, load_jobs
from datasched.runtime.reports import EngineConfig, RunReport
from datasched.runtime.session import (
    ClusterOptions,
    build_scheduler,
    default_calibration,
    job_space,
    open_cluster,
    run_jobs,
)
from runtime_support import KillOnFirstPacket

DATA = Path(__file__).resolve().parent.parent / "data"
NANO = DATA / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
HZZ = DATA / "uproot-HZZ.root"
ANALYSIS = Path(__file__).resolve().parent / "coffea_analysis.py"
CONFIG = EngineConfig(queue_s=0.5, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.5, min_events=100, chunksize=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two NanoAOD datasets of two files each, and an HZZ dataset of two files (copies under
    other names: distinct files to the cache), as coffea filesets; and coffea's Runner's
    results over them, computed once."""
    root = tmp_path_factory.mktemp("coffea-data")
    nano: dict[str, Any] = {}
    for ds, xsec in (("ttbar_a", 1.5), ("ttbar_b", 2.5)):
        paths = []
        for i in range(2):
            paths.append(root / f"{ds}_{i}.root")
            shutil.copy(NANO, paths[-1])
        nano[ds] = {"files": {str(p): "Events" for p in paths}, "metadata": {"xsec": xsec}}
    hzz_paths = [root / f"hzz_{i}.root" for i in range(2)]
    for p in hzz_paths:
        shutil.copy(HZZ, p)
    hzz = {"hzz": {"files": [str(p) for p in hzz_paths], "treename": "events"}}
    (root / "nano.json").write_text(yaml.safe_dump(nano))
    from runtime import coffea_analysis

    def runner(schema: Any, fileset: dict[str, Any], proc: Any) -> Any:
        run = processor.Runner(executor=processor.IterativeExecutor(), schema=schema, chunksize=150)
        return run(fileset, processor_instance=proc)

    return {
        "root": root,
        "nano": nano,
        "hzz": hzz,
        "nano_ref": runner(NanoAODSchema, nano, coffea_analysis.MuonAnalysis(min_pt=4.0)),
        "hzz_ref": runner(BaseSchema, hzz, coffea_analysis.HZZAnalysis()),
    }


def jobs(tmp_path: Path, files: dict[str, Any], **extra: Any) -> list[JobSpec]:
    doc = {
        "jobs": [
            {
                "id": "muons",
                "fileset": str(files["root"] / "nano.json"),  # a fileset file
                "processor": f"{ANALYSIS}:MuonAnalysis",
                "processor_args": {"min_pt": 4.0},
                "schema": "nanoaod",
                "output": "out/muons.coffea",
            },
            {
                "id": "hzz",
                "fileset": files["hzz"],  # inline
                "processor": f"{ANALYSIS}:HZZAnalysis",
                "schema": "base",
                "output": "out/hzz.coffea",
                "submit_s": 0.2,
                **extra,
            },
        ]
    }
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_jobs(path)


def options(tmp_path: Path, **kw: Any) -> ClusterOptions:
    return ClusterOptions(
        **{"workers": 2, "cache_bytes": 10**8, "cache_root": tmp_path / "caches", **kw}
    )


def assert_same_as_coffea(report: RunReport, specs: list[JobSpec], files: dict[str, Any]) -> None:
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    assert {j.id for j in report.jobs} == {"muons/ttbar_a", "muons/ttbar_b", "hzz/hzz"}
    for name, ref in (("muons", files["nano_ref"]), ("hzz", files["hzz_ref"])):
        path = next(s.output for s in specs if s.output_of == name)
        for got in (report.results[name], util.load(str(path))):  # and as coffea reads it
            assert set(got) == set(ref)
            for key, value in ref.items():
                if hasattr(value, "values") and hasattr(value, "axes"):  # a histogram
                    assert list(value.axes[0]) == list(got[key].axes[0])  # the datasets
                    assert got[key].values().tolist() == value.values().tolist(), key
                    mine, theirs = got[key].variances(), value.variances()
                    assert (mine is None) == (theirs is None), key
                    if theirs is not None:
                        assert mine.tolist() == theirs.tolist(), key
                else:
                    assert got[key] == value, key
                    assert type(got[key]) is type(value), key  # types kept


def test_fileset_jobs_and_metadata(tmp_path: Path, files: dict[str, Any]) -> None:
    specs = jobs(tmp_path, files)
    by_id = {s.id: s for s in specs}
    assert set(by_id) == {"muons/ttbar_a", "muons/ttbar_b", "hzz/hzz"}
    a = by_id["muons/ttbar_a"]
    assert a.group == "muons"
    assert a.output == by_id["muons/ttbar_b"].output
    assert a.read.dataset == "ttbar_a"
    assert a.read.metadata == {"xsec": 1.5}
    assert a.schema == "nanoaod"
    assert a.n_events == 400
    assert by_id["hzz/hzz"].dataset.files[0].tree == "events"


@pytest.mark.parametrize(
    "policy",
    [
        "out-of-order",
        pytest.param("farm", marks=pytest.mark.slow),
        # Also run, with a worker killed, by the next test.
        pytest.param("cache-splitting", marks=pytest.mark.slow),
    ],
)
def test_results_equal_coffeas_runner(policy: str, tmp_path: Path, files: dict[str, Any]) -> None:
    specs = jobs(tmp_path, files)
    report = asyncio.run(
        run_jobs(
            specs, options(tmp_path), policy=policy, config=CONFIG, packets=PACKETS, calibrate=False
        )
    )
    assert_same_as_coffea(report, specs, files)
    if policy == "farm":
        assert report.cache_hit_ratio == 0
    # Every packet read only the branches it used: far less than the files hold.
    nano = [p for p in report.packets if p.job.startswith("muons")]
    assert nano
    assert all(0 < p.bytes_read < 30_000 for p in nano)


# Slow (30 s): the default run kills a worker mid-job under every registered policy
# (tests/runtime/test_engine.py); this one adds coffea's processor on top.
@pytest.mark.slow
def test_with_a_worker_killed_mid_run(tmp_path: Path, files: dict[str, Any]) -> None:
    specs = jobs(tmp_path, files)
    total = sum(f.n_bytes for s in specs for f in s.dataset.files)
    opts = options(tmp_path, tertiary_bytes_per_s=total / 6)  # the run lasts seconds

    async def main() -> RunReport:
        from datasched.runtime.engine import RuntimeEngine

        space = job_space(specs)
        async with open_cluster(opts) as (client, names):
            pids: dict[str, int] = await client.run(os.getpid)
            victim = max(pids.values())
            killer = KillOnFirstPacket(victim)
            killed = killer.killed

            sched = build_scheduler(
                len(names),
                opts,
                space,
                default_calibration(opts.tertiary_bytes_per_s),
                policy="cache-splitting",
                packets=PACKETS,
            )
            engine = RuntimeEngine(client, sched, names, config=CONFIG, progress=killer)
            report = await engine.run(specs, known_cache={})
            assert killed
            assert engine.worker_departures >= 1
            return report

    assert_same_as_coffea(asyncio.run(main()), specs, files)
