"""Datasets, catalogs, jobs files, processors and the demo data: the runtime's inputs, and the
errors a user gets for bad ones (one line naming the job and the field)."""

from __future__ import annotations

import json
import pickle
from itertools import pairwise
from pathlib import Path

import hist
import numpy as np
import pytest
import uproot
import yaml
from typer.testing import CliRunner

from datasched.cli import app
from datasched.runtime.dataset import (
    CatalogError,
    Dataset,
    DatasetError,
    FileEntry,
    load_catalog,
    open_dataset,
    read_events,
)
from datasched.runtime.demodata import DimuonMass, write_demo_dataset
from datasched.runtime.jobspec import JobSpecError, load_jobs
from datasched.runtime.outputs import merge, write_output
from datasched.runtime.processor import ProcessorError, load_processor
from runtime_support import N_EVENTS, N_FILES, reference_counts

DS = Dataset("d", tuple(FileEntry(f"f{i}", "T", n, 10 * n) for i, n in enumerate((5, 0, 7, 3))))


def test_locate_spans_files_and_skips_empty_ones() -> None:
    assert DS.n_events == 15
    assert DS.n_bytes == 150
    assert DS.bytes_per_event == 10
    assert DS.locate(3, 13) == [(0, 3, 5), (2, 0, 7), (3, 0, 1)]
    assert DS.locate(5, 12) == [(2, 0, 7)]
    assert DS.locate(4, 4) == []
    assert DS.file_range(2) == (5, 12)
    assert DS.file_index_at(12) == 3
    with pytest.raises(ValueError, match="outside the dataset"):
        DS.locate(0, 16)


def test_catalog_and_reading(demo_catalog: Path) -> None:
    ds = load_catalog(demo_catalog)["zmumu"]
    assert ds.n_events == N_EVENTS
    assert len(ds.files) == N_FILES
    opened = open_dataset("again", [f.url for f in ds.files], "Events")
    assert [(f.n_events, f.n_bytes) for f in opened.files] == [
        (f.n_events, f.n_bytes) for f in ds.files
    ]
    i, a, b = ds.locate(2500, 2600)[0]
    events = read_events(ds.files[i].url, "Events", a, b)
    assert list(events["event"]) == list(range(2500, 2600))


def test_catalog_and_dataset_errors(tmp_path: Path, demo_catalog: Path) -> None:
    bad = tmp_path / "catalog.yaml"
    bad.write_text(yaml.safe_dump({"datasets": {"x": {"files": ["a.root"]}}}))
    with pytest.raises(CatalogError, match="dataset 'x': field 'tree': missing"):
        load_catalog(bad)
    bad.write_text(yaml.safe_dump({"datasets": {"x": {"tree": "T", "files": ["nope.root"]}}}))
    with pytest.raises(CatalogError, match=r"nope\.root: no such file"):
        load_catalog(bad)
    with pytest.raises(DatasetError, match="no tree 'Nope'"):
        open_dataset("x", [str(next(demo_catalog.parent.glob("*.root")))], "Nope")


def test_demo_data_is_deterministic_with_a_z_peak(tmp_path: Path) -> None:
    a = write_demo_dataset(tmp_path / "a", n_events=3000, n_files=2, seed=5)
    b = write_demo_dataset(tmp_path / "b", n_events=3000, n_files=2, seed=5)
    ea = read_events(str(a.parent / "part-001.root"), "Events", 0, 1500)
    eb = read_events(str(b.parent / "part-001.root"), "Events", 0, 1500)
    assert ea.to_list() == eb.to_list()
    h = DimuonMass().process(read_events(str(a.parent / "part-000.root"), "Events", 0, 1500))
    centers = h["mass"].axes[0].centers
    assert 88 <= centers[int(np.argmax(h["mass"].values()))] <= 94
    with pytest.raises(ValueError, match="n_events"):
        write_demo_dataset(tmp_path / "c", n_events=1, n_files=2)


def test_piecewise_processing_merges_to_the_whole(demo_catalog: Path) -> None:
    whole = reference_counts(demo_catalog, 0, N_EVENTS)
    cuts = [*range(0, N_EVENTS, 1700), N_EVENTS]
    parts = [reference_counts(demo_catalog, a, b) for a, b in pairwise(cuts)]
    assert np.sum(parts, axis=0).tolist() == whole


def test_merge_rules() -> None:
    h1 = hist.Hist.new.Reg(4, 0, 4).Double()
    h2 = h1.copy()
    h1.fill([1.5])
    h2.fill([1.5, 2.5])
    out = merge({"h": h1, "n": 1, "l": [1]}, {"h": h2, "n": 2, "l": [2], "x": 7})
    assert out["h"].values().tolist() == [0, 2, 1, 0]
    assert (out["n"], out["l"], out["x"]) == (3, [1, 2], 7)
    assert merge(None, 5) == 5
    with pytest.raises(TypeError, match="cannot merge dict with int"):
        merge({"a": 1}, 3)


def test_processor_references(tmp_path: Path) -> None:
    (tmp_path / "ana.py").write_text(
        "class P:\n    def process(self, events):\n        return len(events)\n"
        "def count(events):\n    return 2 * len(events)\nprocessor = P\n"
    )
    assert load_processor("ana.py", tmp_path).process([1, 2]) == 2
    assert load_processor("ana.py:count", tmp_path).process([1, 2]) == 4
    assert isinstance(load_processor("datasched.runtime.demodata:DimuonMass", tmp_path), DimuonMass)
    with pytest.raises(ProcessorError, match="'nothing' not found"):
        load_processor("ana.py:nothing", tmp_path)
    with pytest.raises(ProcessorError, match="no such file"):
        load_processor("missing.py", tmp_path)


def test_outputs_are_written_whole(tmp_path: Path) -> None:
    h = hist.Hist.new.Reg(3, 0, 3, name="x").Double()
    h.fill([0.5, 1.5, 1.5])
    write_output({"h": h, "n": 3}, tmp_path / "r.pkl")
    assert pickle.loads((tmp_path / "r.pkl").read_bytes())["n"] == 3
    write_output({"h": h, "n": 3}, tmp_path / "r.root")
    with uproot.open(tmp_path / "r.root") as f:
        assert f["h"].values().tolist() == [1, 2, 0]
    with pytest.raises((pickle.PicklingError, AttributeError)):
        write_output({"f": lambda: 1}, tmp_path / "bad.pkl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.pkl", "r.root"]


def jobs_file(tmp_path: Path, catalog: Path, jobs: list[dict[str, object]]) -> Path:
    path = tmp_path / "jobs.yaml"
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass"},
    }
    path.write_text(yaml.safe_dump({**doc, "jobs": jobs}))
    return path


def test_jobs_file_forms_and_order(tmp_path: Path, demo_catalog: Path) -> None:
    files = str(demo_catalog.parent / "part-00[01].root")
    specs = load_jobs(
        jobs_file(
            tmp_path,
            demo_catalog,
            [
                {"id": "late", "dataset": "zmumu", "submit_s": 5},
                {"id": "early", "files": [files], "tree": "Events", "events": [10, 20]},
            ],
        )
    )
    assert [s.id for s in specs] == ["early", "late"]
    assert (specs[0].start, specs[0].stop, len(specs[0].dataset.files)) == (10, 20, 2)
    assert specs[1].n_events == N_EVENTS
    assert specs[1].output == tmp_path / "late.pkl"


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"dataset": "zmumu"}, r"job None \(#1\): field 'id'"),
        ({"id": "a", "dataset": "nope"}, "job 'a' .*field 'dataset': unknown dataset 'nope'"),
        ({"id": "a", "dataset": "zmumu", "files": ["x"]}, "field 'dataset': give one of"),
        ({"id": "a", "dataset": "zmumu", "events": [5, 2]}, "field 'events'"),
        ({"id": "a", "dataset": "zmumu", "events": [0, 10**9]}, "field 'events'"),
        ({"id": "a", "dataset": "zmumu", "processor": "x.py"}, "field 'processor'"),
        ({"id": "a", "dataset": "zmumu", "output": "r.txt"}, "field 'output'"),
        ({"id": "a", "dataset": "zmumu", "submit_s": -1}, "field 'submit_s'"),
        ({"id": "a", "dataset": "zmumu", "colour": "red"}, "field 'colour': unknown"),
        ({"id": "a", "files": ["none*.root"], "tree": "T"}, "field 'files'.*no file matches"),
    ],
)
def test_jobs_file_errors_name_job_and_field(
    tmp_path: Path, demo_catalog: Path, job: dict[str, object], message: str
) -> None:
    with pytest.raises(JobSpecError, match=message):
        load_jobs(jobs_file(tmp_path, demo_catalog, [job]))


def test_cli_run_json_and_bad_input(tmp_path: Path, demo_catalog: Path) -> None:
    path = jobs_file(tmp_path, demo_catalog, [{"id": "j", "dataset": "zmumu", "events": [0, 4000]}])
    runner = CliRunner()
    args = ["run", str(path), "--workers", "2", "--cache-dir", str(tmp_path / "c"), "--json"]
    result = runner.invoke(app, [*args, "--packets", str(tmp_path / "p.csv")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    job = doc["jobs"][0]
    assert job["events_processed"] == job["events_expected"] == 4000
    assert set(job) >= {"id", "wall_s", "wait_s", "cache_hit_ratio", "bytes_from_tertiary"}
    assert (tmp_path / "p.csv").read_text().startswith("job,node,url,start,stop,source")
    # Bad input: one line, exit 2, nothing started.
    path.write_text("jobs: [\n")
    bad = runner.invoke(app, ["run", str(path)])
    assert bad.exit_code == 2
    assert "not valid YAML" in bad.output
    bad = runner.invoke(app, ["run", str(tmp_path / "none.yaml")])
    assert bad.exit_code == 2
    assert "no such file" in bad.output
    bad = runner.invoke(app, ["run", str(tmp_path / "none.yaml"), "--policy", "nope"])
    assert bad.exit_code == 2
    assert "unknown policy" in bad.output
