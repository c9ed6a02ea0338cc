"""The demo dataset and analysis: deterministic files, a Z peak, and a result that does not
depend on how the events were split into packets."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml

from datasched.runtime.dataset import Dataset, load_catalog, open_dataset, read_events
from datasched.runtime.demodata import (
    DimuonMass,
    demo_dataset_is_current,
    plot_mass,
    write_demo_dataset,
)
from datasched.runtime.outputs import merge_all

N_EVENTS = 2_000
N_FILES = 3
MUONS, CHARGE, SUMS = 765, -7, [20590.8, 58.1, -69.5]
"""The first file's muons (seed 11) as the demo wrote them before the electrons and the MET
were added: their number, their charges' sum, and the sums of their pt, eta and phi."""


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2,000-event demo dataset in three files (not to be modified by tests)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("data"), n_events=N_EVENTS, n_files=N_FILES, seed=11
    )


def all_events(ds: Dataset) -> ak.Array:
    return ak.concatenate([read_events(f.url, f.tree, 0, f.n_events) for f in ds.files])


def process_range(ds: Dataset, start: int, stop: int) -> Any:
    """Process ``[start, stop)`` piece by piece (one piece per file touched), merged."""
    proc = DimuonMass()
    parts = []
    for i, a, b in ds.locate(start, stop):
        f = ds.files[i]
        parts.append(proc.process(read_events(f.url, f.tree, a, b)))
    return merge_all(parts)


def test_files_and_catalog(catalog: Path) -> None:
    doc = yaml.safe_load(catalog.read_text())
    ds = load_catalog(catalog)["zmumu"]
    assert [f["url"] for f in doc["datasets"]["zmumu"]["files"]] == [
        "part-000.root",
        "part-001.root",
        "part-002.root",
    ]
    assert sorted(p.name for p in catalog.parent.iterdir()) == [
        "catalog.yaml",
        "part-000.root",
        "part-001.root",
        "part-002.root",
    ]
    # The catalog's counts are the files' own.
    opened = open_dataset("zmumu", [f.url for f in ds.files], "Events")
    assert opened == ds
    assert [f.n_events for f in ds.files] == [667, 667, 666]
    with uproot.open(ds.files[0].url) as f:
        tree = f["Events"]
        # Shaped like NanoAOD: event ids, collections with their counters, a flat record.
        assert tree.keys() == [
            "run",
            "luminosityBlock",
            "event",
            "nMuon",
            *(f"Muon_{k}" for k in ("pt", "eta", "phi", "mass", "charge")),
            "nElectron",
            *(f"Electron_{k}" for k in ("pt", "eta", "phi", "mass", "charge")),
            "MET_pt",
            "MET_phi",
        ]
        assert tree.typenames() == {
            "run": "uint32_t",
            "luminosityBlock": "uint32_t",
            "event": "int64_t",
            **{f"n{c}": "int32_t" for c in ("Muon", "Electron")},
            **{f"{c}_{k}": "float[]" for c in ("Muon", "Electron") for k in ("pt", "eta", "phi")},
            **{f"{c}_mass": "float[]" for c in ("Muon", "Electron")},
            **{f"{c}_charge": "int32_t[]" for c in ("Muon", "Electron")},
            "MET_pt": "float",
            "MET_phi": "float",
        }
    events = all_events(ds)
    assert events["event"].to_list() == list(range(N_EVENTS))
    n = ak.num(events["Muon_pt"])
    assert ak.all(events["nMuon"] == n)
    assert ak.min(n) == 0
    assert ak.max(n) <= 4
    assert ak.all(ak.num(events["Muon_charge"]) == n)
    assert set(ak.flatten(events["Muon_charge"]).to_list()) == {-1, 1}
    assert ak.all(events["Muon_pt"][:, :-1] >= events["Muon_pt"][:, 1:])  # sorted by pt
    assert ak.all(abs(events["Muon_phi"]) <= np.pi + 1e-6)
    assert ak.all(events["Muon_mass"] == np.float32(0.10566))
    assert events["run"].to_list() == [1] * N_EVENTS
    assert events["luminosityBlock"].to_list() == [1 + i // 1000 for i in range(N_EVENTS)]
    assert ak.all(events["nElectron"] == ak.num(events["Electron_pt"]))
    assert ak.all(events["Electron_pt"][:, :-1] >= events["Electron_pt"][:, 1:])
    assert ak.all(events["MET_pt"] >= 0)


def test_the_muons_are_those_the_demo_always_wrote(catalog: Path) -> None:
    """The electrons and the MET come from a stream of their own: the muons, and so every
    result of the demo's analysis, are what the files held before those were added (sums
    of the first file's muons, written before and after)."""
    f = load_catalog(catalog)["zmumu"].files[0]
    events = read_events(f.url, f.tree, 0, f.n_events)
    sums = [round(float(ak.sum(events[f"Muon_{k}"])), 1) for k in ("pt", "eta", "phi")]
    assert (int(ak.sum(events["nMuon"])), int(ak.sum(events["Muon_charge"]))) == (
        MUONS,
        CHARGE,
    )
    assert sums == SUMS


def test_same_seed_same_events(tmp_path: Path, catalog: Path) -> None:
    again = write_demo_dataset(tmp_path / "a", n_events=N_EVENTS, n_files=N_FILES, seed=11)
    other = write_demo_dataset(tmp_path / "b", n_events=N_EVENTS, n_files=N_FILES, seed=12)
    ref = all_events(load_catalog(catalog)["zmumu"])
    assert all_events(load_catalog(again)["zmumu"]).to_list() == ref.to_list()
    assert all_events(load_catalog(other)["zmumu"]).to_list() != ref.to_list()


def test_the_mass_has_a_z_peak(catalog: Path) -> None:
    ds = load_catalog(catalog)["zmumu"]
    result = DimuonMass().process(all_events(ds))
    h = result["mass"]
    assert (h.axes[0].name, h.axes[0].label, h.axes[0].size) == ("mass", "m(μμ) [GeV]", 60)
    assert tuple(h.axes[0].edges[[0, -1]]) == (60, 120)
    peak = h.axes[0].centers[int(np.argmax(h.values()))]
    assert 88 <= peak <= 94
    assert result["n_events"] == N_EVENTS
    assert h.sum(flow=True) == result["n_pairs"]
    # About 30% of events are Z decays; most pairs land near the peak.
    assert 0.25 * N_EVENTS < result["n_pairs"] < 0.5 * N_EVENTS
    assert h[80j:100j].sum() > 0.7 * h.sum()
    assert DimuonMass().postprocess(result) is result


def test_piecewise_processing_merges_to_the_whole(catalog: Path) -> None:
    ds = load_catalog(catalog)["zmumu"]
    whole = process_range(ds, 0, N_EVENTS)
    for cuts in ([0, 1, 500, 667, 668, 1333, 1999, N_EVENTS], list(range(0, N_EVENTS + 1, 125))):
        merged = merge_all(process_range(ds, a, b) for a, b in pairwise(cuts))
        assert merged["mass"].values().tolist() == whole["mass"].values().tolist()
        assert merged["mass"].sum(flow=True) == whole["mass"].sum(flow=True)
        assert (merged["n_events"], merged["n_pairs"]) == (N_EVENTS, whole["n_pairs"])


def test_packets_without_pairs(catalog: Path) -> None:
    f = load_catalog(catalog)["zmumu"].files[0]
    events = read_events(f.url, f.tree, 0, 50)
    single = events[ak.num(events["Muon_pt"]) < 2]
    for packet in (events[:0], single):
        result = DimuonMass().process(packet)
        assert (result["n_events"], result["n_pairs"]) == (len(packet), 0)
        assert result["mass"].sum() == 0
    same_sign = ak.zip(
        {
            "Muon_pt": [[50.0, 40.0, 30.0]],
            "Muon_eta": [[0.0, 0.0, 0.0]],
            "Muon_phi": [[0.0, np.pi, np.pi]],
            "Muon_charge": [[1, 1, -1]],
        },
        depth_limit=1,
    )
    # The leading muon pairs with the highest-pt muon of opposite charge: m = 2√(50·30).
    result = DimuonMass().process(same_sign)
    assert result["n_pairs"] == 1
    assert result["mass"].axes[0].index(2 * np.sqrt(50 * 30)) == int(
        np.argmax(result["mass"].values())
    )


def test_argument_checks_and_rewriting(tmp_path: Path) -> None:
    for kwargs, name in (
        ({"n_events": 1, "n_files": 2}, "n_events"),
        ({"n_files": 0}, "n_files"),
        ({"n_events": 10, "n_files": 1.5}, "n_files"),
        ({"seed": -1}, "seed"),
    ):
        with pytest.raises(ValueError, match=f"^{name}: expected an integer"):
            write_demo_dataset(tmp_path / "x", **kwargs)
    assert not (tmp_path / "x").exists()
    d = tmp_path / "d"
    write_demo_dataset(d, n_events=40, n_files=4)
    catalog = write_demo_dataset(d, n_events=30, n_files=2)  # fewer files: the catalog says so
    ds = load_catalog(catalog)["zmumu"]
    assert [Path(f.url).name for f in ds.files] == ["part-000.root", "part-001.root"]
    assert ds.n_events == 30
    assert all_events(ds)["event"].to_list() == list(range(30))
    assert not list(d.glob(".*"))  # no temporary files left


def test_an_older_versions_dataset_is_not_current(tmp_path: Path, catalog: Path) -> None:
    """The demo writes its dataset again over one an older version wrote (files without
    NanoAOD's event ids), or one whose files changed, instead of running on it."""
    assert demo_dataset_is_current(catalog)
    old = tmp_path / "old"
    old.mkdir()
    doc = yaml.safe_load(catalog.read_text())
    for f in doc["datasets"]["zmumu"]["files"]:
        src = catalog.parent / f["url"]
        with uproot.open(src) as root:
            events = root["Events"]["event"].array(library="np")
        with uproot.recreate(old / f["url"]) as out:
            out["Events"] = {"event": events}
        f["n_bytes"] = (old / f["url"]).stat().st_size
    (old / "catalog.yaml").write_text(yaml.safe_dump(doc))
    assert not demo_dataset_is_current(old / "catalog.yaml")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in doc["datasets"]["zmumu"]["files"]:
        (damaged / f["url"]).write_bytes((catalog.parent / f["url"]).read_bytes()[:100])
    (damaged / "catalog.yaml").write_text(catalog.read_text())
    assert not demo_dataset_is_current(damaged / "catalog.yaml")
    (damaged / "catalog.yaml").write_text("datasets: [")
    assert not demo_dataset_is_current(damaged / "catalog.yaml")


def test_default_size_is_small(tmp_path: Path) -> None:
    catalog = write_demo_dataset(tmp_path)
    ds = load_catalog(catalog)["zmumu"]
    assert (ds.n_events, len(ds.files)) == (200_000, 20)
    assert ds.n_bytes < 30e6
    assert ds.n_bytes == sum(p.stat().st_size for p in tmp_path.glob("part-*.root"))


def test_plot_mass(tmp_path: Path, catalog: Path) -> None:
    ds = load_catalog(catalog)["zmumu"]
    h = DimuonMass().process(all_events(ds))["mass"]
    path = plot_mass(h, tmp_path / "plots" / "mass.png")
    assert path == tmp_path / "plots" / "mass.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["mass.png"]


def test_the_examples_beside_the_data_load_and_are_not_overwritten(tmp_path: Path) -> None:
    from datasched.runtime.demodata import write_examples
    from datasched.runtime.jobspec import load_jobs

    write_demo_dataset(tmp_path, n_events=400, n_files=4)
    written = write_examples(tmp_path, 400)
    assert sorted(p.name for p in written) == ["jobs.yaml", "request.xml"]
    # The jobs file: two overlapping jobs of the dataset, its catalog found beside it.
    jobs = load_jobs(tmp_path / "jobs.yaml")
    assert [(j.id, j.start, j.stop) for j in jobs] == [
        ("zpeak-1", 0, 120),
        ("zpeak-2", 60, 180),
    ]
    # The request: every file of the dataset, under a daemon whose roots hold the directory
    # (checked as `datasched request check` checks it, events counted from the files).
    from typer.testing import CliRunner

    from datasched.cli import app

    checked = CliRunner().invoke(
        app, ["request", "check", str(tmp_path / "request.xml"), "--roots", str(tmp_path)]
    )
    assert checked.exit_code == 0, checked.output
    # one elementary job: no node yet, its 4 files, 400 events
    assert re.search(r"check\.0\s+-\s+4\s+400\s", checked.output), checked.output
    # A user's edit is kept: nothing is written over an existing file.
    (tmp_path / "jobs.yaml").write_text("mine\n")
    assert write_examples(tmp_path, 400) == []
    assert (tmp_path / "jobs.yaml").read_text() == "mine\n"
