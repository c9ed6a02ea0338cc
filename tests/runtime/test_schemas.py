"""Schemas: the demo data fit coffea's NanoAODSchema (a coffea processor runs on them
unchanged, every event once, the docs' example as written), a file a schema refuses is
refused in one line before anything runs, and a schema's options are checked against an
allow-list and reach the workers that build the events."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml
from typer.testing import CliRunner

pytest.importorskip("coffea", reason="the coffea extra is not installed")

from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

from datasched.cli import app
from datasched.core.packets import PacketSizing
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.events import schema_class, schema_mismatch
from datasched.runtime.jobspec import JobSpecError, load_jobs
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import ClusterOptions, run_jobs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "coffea"
ANALYSIS = Path(__file__).resolve().parent / "coffea_analysis.py"
N_EVENTS = 4_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory as docs/runtime.md's "From coffea" leaves it: ``data/`` from ``datasched
    demo-data data/ --files 4`` (fewer events), the example's files copied beside it, and
    ``noids.root``: the demo's first file without ``run`` and ``luminosityBlock``."""
    root = tmp_path_factory.mktemp("coffea-demo")
    write_demo_dataset(root / "data", n_events=N_EVENTS, n_files=4, seed=5)
    for f in EXAMPLE.iterdir():
        shutil.copy(f, root / f.name)
    with uproot.open(root / "data" / "part-000.root") as f:
        arrays = f["Events"].arrays(filter_name=["event", "nMuon", "Muon_*"])
    muons = ak.zip({k.removeprefix("Muon_"): arrays[k] for k in arrays.fields if "_" in k})
    with uproot.recreate(root / "noids.root") as f:
        f.mktree("Events", {"event": np.int64, "Muon": muons.type.content})
        f["Events"].extend({"event": arrays["event"], "Muon": muons})
    return root


def write(root: Path, jobs: list[dict[str, Any]], name: str = "jobs-test.yaml") -> Path:
    path = root / name
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    return path


def refusal(root: Path, job: dict[str, Any]) -> str:
    with pytest.raises(JobSpecError) as info:
        load_jobs(write(root, [{"id": "j", "processor": f"{ANALYSIS}:MuonCount", **job}]))
    message = str(info.value)
    assert "\n" not in message  # one line
    return message


def test_the_demo_data_are_nanoaod(data: Path) -> None:
    path = data / "data" / "part-001.root"
    assert schema_mismatch(str(path), "Events", "nanoaod") is None
    events = NanoEventsFactory.from_root(
        {str(path): "Events"},
        mode="virtual",
        schemaclass=schema_class("nanoaod", (("warn_missing_crossrefs", False),)),
    ).events()
    assert {"run", "luminosityBlock", "event", "Muon", "Electron", "MET"} <= set(events.fields)
    assert events.event.to_list() == list(range(1000, 2000))
    assert set(events.run.to_list()) == {1}
    assert events.luminosityBlock.to_list() == [2] * 1000  # events 1000-1999: block 2
    muons = events.Muon
    assert ak.all(abs(muons.mass - 0.10566) < 1e-6)
    two = muons[ak.num(muons) >= 2]
    mass = (two[:, 0] + two[:, 1]).mass  # coffea's Lorentz vectors
    assert 0.5 < float(ak.mean((mass > 80) & (mass < 100))) < 0.9  # the Z peak
    assert ak.all(events.MET.pt >= 0)
    assert ak.all(abs(events.Electron.mass - 0.000511) < 1e-6)
    with uproot.open(path) as f:  # NanoAOD's counters, which the schema turns into offsets
        assert f["Events"]["nElectron"].array().to_list() == ak.num(events.Electron).to_list()


def test_schema_options_set_on_a_subclass_only() -> None:
    quiet = schema_class("nanoaod", (("error_missing_event_ids", False),))
    assert issubclass(quiet, NanoAODSchema)
    assert quiet is not NanoAODSchema
    assert quiet.error_missing_event_ids is False
    assert NanoAODSchema.error_missing_event_ids is True  # coffea's class left as it is
    assert schema_class("nanoaod", (("error_missing_event_ids", False),)) is quiet
    assert schema_class("nanoaod") is NanoAODSchema
    bad_options: list[tuple[tuple[str, Any], ...]] = [
        (("mixins", {}),),
        (("error_missing_event_ids", "no"),),
    ]
    for bad in bad_options:
        with pytest.raises(ValueError, match="is not allowed"):
            schema_class("nanoaod", bad)  # the workers check again what the file's check did


def test_a_schema_that_does_not_fit_is_refused_in_one_line(data: Path) -> None:
    message = refusal(data, {"files": ["noids.root"], "tree": "Events", "schema": "nanoaod"})
    assert "job 'j' (#1): field 'schema': dataset 'j' does not fit it:" in message
    assert "has no branch run, luminosityBlock, which NanoAODSchema requires" in message
    assert "schema_options: {error_missing_event_ids: false}" in message
    # A fileset's datasets are each checked, and named.
    fileset = {"good": ["data/part-000.root"], "bad": ["noids.root"]}
    message = refusal(data, {"fileset": fileset, "tree": "Events", "schema": "nanoaod"})
    assert "field 'schema': dataset 'bad' does not fit it" in message
    # A flat ntuple is no NanoAOD.
    hzz = str(ROOT / "tests" / "data" / "uproot-HZZ.root")
    message = refusal(data, {"files": [hzz], "tree": "events", "schema": "nanoaod"})
    assert "has no branch run, luminosityBlock, event," in message
    # With the option, or another schema, the same files are accepted.
    for job in (
        {"schema": "nanoaod", "schema_options": {"error_missing_event_ids": False}},
        {"schema": "base"},
        {"schema": "none"},
    ):
        job = {"id": "j", "files": ["noids.root"], "tree": "Events", **job}
        (spec,) = load_jobs(write(data, [{"processor": f"{ANALYSIS}:MuonCount", **job}]))
        assert spec.schema == job["schema"]


def test_the_cli_refuses_it_in_one_line(data: Path) -> None:
    path = write(
        data,
        [
            {
                "id": "j",
                "files": ["noids.root"],
                "tree": "Events",
                "schema": "nanoaod",
                "processor": f"{ANALYSIS}:MuonCount",
            }
        ],
        "jobs-cli.yaml",
    )
    result = CliRunner().invoke(app, ["run", str(path), "--cache-dir", str(data / "c")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "field 'schema': dataset 'j' does not fit it" in lines[0]


@pytest.mark.parametrize(
    ("schema", "options", "message"),
    [
        (
            "nanoaod",
            {"error_missing_event_id": False},
            "field 'schema_options': unknown option 'error_missing_event_id' for schema "
            "'nanoaod' (expected: error_missing_event_ids, warn_missing_crossrefs)",
        ),
        (
            "nanoaod",
            {"__class__": "x", "error_missing_event_ids": False},
            "unknown option '__class__'",
        ),
        (
            "nanoaod",
            {"error_missing_event_ids": "no"},
            "field 'schema_options': option 'error_missing_event_ids': expected a bool, got 'no'",
        ),
        ("nanoaod", ["error_missing_event_ids"], "field 'schema_options': expected a mapping"),
        ("base", {"error_missing_event_ids": False}, "for schema 'base' (expected: none)"),
        ("none", {"warn_missing_crossrefs": False}, "for schema 'none' (expected: none)"),
    ],
)
def test_a_bad_schema_option_is_refused(
    data: Path, schema: str, options: Any, message: str
) -> None:
    job = {"files": ["data/part-000.root"], "tree": "Events", "schema": schema}
    assert message in refusal(data, {**job, "schema_options": options})


@pytest.mark.slow  # a cluster: 30 s on an idle 2-core machine
def test_nanoaod_jobs_on_the_demo_data_every_event_once(data: Path, tmp_path: Path) -> None:
    """The docs' example as written (its jobs file, fileset and processor), a job that counts
    NanoAOD's event ids, and one whose file lacks them (it runs only if the option reached
    the workers: coffea's own default refuses the file there)."""
    (example,) = yaml.safe_load((data / "jobs.yaml").read_text())["jobs"]
    jobs = [
        example,
        {
            "id": "ids",
            "files": ["data/part-*.root"],
            "tree": "Events",
            "processor": f"{ANALYSIS}:EventIds",
            "schema": "nanoaod",
            "schema_options": {"warn_missing_crossrefs": False},
            "output": "out/ids.pkl",
        },
        {
            "id": "noids",
            "files": ["noids.root"],
            "tree": "Events",
            "processor": f"{ANALYSIS}:MuonCount",
            "schema": "nanoaod",
            "schema_options": {"error_missing_event_ids": False, "warn_missing_crossrefs": False},
            "output": "out/noids.pkl",
        },
    ]
    specs = load_jobs(write(data, jobs, "jobs-run.yaml"))
    assert {s.id: s.read.schema_options for s in specs}["noids"] == (
        ("error_missing_event_ids", False),
        ("warn_missing_crossrefs", False),
    )
    report = asyncio.run(
        run_jobs(
            specs,
            ClusterOptions(workers=2, cache_bytes=10**8, cache_root=tmp_path / "caches"),
            policy="out-of-order",
            config=EngineConfig(queue_s=0.5, poll_s=0.1),
            packets=PacketSizing(target_s=0.5, min_events=100, chunksize=700),
            calibrate=False,
        )
    )
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    ids = report.results["ids"]
    assert ids["n"] == N_EVENTS  # every event once: as many seen as there are ...
    assert {e for _, _, e in ids["ids"]} == set(range(N_EVENTS))  # ... and each of them
    assert {(r, lumi) for r, lumi, _ in ids["ids"]} == {(1, 1), (1, 2), (1, 3), (1, 4)}
    assert abs(ids["mass_sum"] - 0.10566 * ids["muons"]) < 1e-3 * ids["muons"]
    assert report.results["noids"]["n"] == 1000
    assert report.results["noids"]["events"] == set(range(1000))
    mine = report.results["mine"]
    assert dict(mine["cutflow"]) == {"zmumu": N_EVENTS}
    mass = mine["mass"]["zmumu", :]
    assert 88 <= mass.axes[0].centers[int(np.argmax(mass.values()))] <= 94  # the Z peak
    assert (data / "out" / "mine.coffea").exists()  # where the docs say
