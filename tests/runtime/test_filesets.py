"""coffea's ways of naming data and results, in jobs files and catalogs: filesets (inline or a
JSON/YAML file, a tree per file, dataset metadata), schemas, columns, processor arguments,
skipped bad files, --maxchunks, and accumulators that keep their types."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from datasched.runtime.dataset import load_catalog
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.jobspec import JobSpecError, limit_chunks, load_jobs
from datasched.runtime.outputs import merge, merge_all, read_output, write_output

DEMO = "datasched.runtime.demodata:DimuonMass"
DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four demo files of 500 events (tree Events) and the HZZ file (tree events)."""
    root = tmp_path_factory.mktemp("data")
    write_demo_dataset(root, n_events=2000, n_files=4, seed=3)
    shutil.copy(DATA / "uproot-HZZ.root", root / "hzz.root")
    return root


def jobs_file(tmp_path: Path, jobs: list[dict[str, Any]], **top: Any) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"defaults": {"processor": DEMO}, "jobs": jobs, **top}))
    return path


def test_a_fileset_is_one_job_per_dataset_with_one_output(tmp_path: Path, data: Path) -> None:
    fileset = {
        "z_a": {
            "files": {str(data / "part-000.root"): "Events", str(data / "part-001.root"): None},
            "treename": "Events",
            "metadata": {"xsec": 1.0, "is_mc": True},
        },
        "z_b": [str(data / "part-002.root")],  # a bare list: the job's tree
    }
    (tmp_path / "fileset.json").write_text(json.dumps(fileset))
    path = jobs_file(
        tmp_path,
        [
            {"id": "inline", "fileset": fileset, "tree": "Events", "output": "o/inline.pkl"},
            {"id": "file", "fileset": "fileset.json", "tree": "Events", "submit_s": 1},
        ],
    )
    specs = load_jobs(path)
    assert [s.id for s in specs] == ["inline/z_a", "inline/z_b", "file/z_a", "file/z_b"]
    a = specs[0]
    assert a.group == "inline"
    assert a.output == tmp_path / "o" / "inline.pkl"
    assert specs[1].output == a.output
    assert specs[2].output == tmp_path / "file.pkl"
    assert a.dataset.name == "z_a"
    assert a.read.metadata == {"xsec": 1.0, "is_mc": True}
    assert a.n_events == 1000
    assert specs[1].n_events == 500
    assert [f.tree for f in a.dataset.files] == ["Events", "Events"]


def test_a_catalog_may_be_a_coffea_fileset(tmp_path: Path, data: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(
        json.dumps(
            {
                "hzz": {"files": {str(data / "hzz.root"): "events"}, "metadata": {"k": 2}},
                "z": {"files": [str(data / "part-003.root")], "treename": "Events"},
            }
        )
    )
    catalog = load_catalog(path)
    assert catalog["hzz"].files[0].tree == "events"
    assert catalog["hzz"].n_events == 2421
    assert catalog["hzz"].metadata == {"k": 2}
    assert catalog["z"].n_events == 500
    # ... and a datasched catalog's files may be {path: tree}, with metadata.
    doc = {"datasets": {"mixed": {"files": {str(data / "hzz.root"): "events"}, "metadata": {}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    assert load_catalog(tmp_path / "c.yaml")["mixed"].n_events == 2421


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"fileset": {"d": {"files": ["x.root"]}}}, r"field 'fileset': .*field 'tree': missing"),
        ({"fileset": {"d": {"file": []}}}, r"field 'fileset': .*field 'file': unknown"),
        ({"fileset": "nope.json"}, r"field 'fileset': .*nope\.json: no such fileset file"),
        ({"fileset": {}, "events": [0, 1]}, r"field 'events': not with 'fileset'"),
        ({"dataset": "z", "fileset": {}}, r"field 'dataset': give one of"),
        ({"files": ["part-000.root"], "tree": "T"}, r"field 'files': .*no tree 'T' \(its trees"),
        ({"files": ["part-000.root"], "tree": "Events", "schema": "cms"}, "field 'schema'"),
        (
            {"files": ["part-000.root"], "tree": "Events", "columns": ["Muon_pt", "Jet_*"]},
            r"field 'columns': 'Jet_\*' matches no branch of .*part-000\.root",
        ),
        (
            {"files": ["part-000.root"], "tree": "Events", "processor_args": ["x"]},
            "field 'processor_args': expected a mapping",
        ),
        (
            {"files": ["part-000.root"], "tree": "Events", "processor_args": {"x": 1}},
            r"field 'processor': .*DimuonMass\(\*\*processor_args\) raised TypeError",
        ),
    ],
)
def test_bad_jobs_are_one_error_naming_the_field(
    tmp_path: Path, data: Path, job: dict[str, Any], message: str
) -> None:
    for f in data.glob("*.root"):
        (tmp_path / f.name).symlink_to(f)
    path = jobs_file(tmp_path, [{"id": "j", **job}])
    with pytest.raises(JobSpecError, match=message):
        load_jobs(path)


def test_skip_bad_files_leaves_them_out_and_records_them(tmp_path: Path, data: Path) -> None:
    (tmp_path / "broken.root").write_bytes(b"not ROOT" * 100)
    files = [str(data / "part-000.root"), str(tmp_path / "broken.root")]
    path = jobs_file(tmp_path, [{"id": "j", "files": files, "tree": "Events"}])
    with pytest.raises(JobSpecError, match=r"broken\.root: not a readable ROOT file"):
        load_jobs(path)
    (spec,) = load_jobs(path, skip_bad_files=True)
    assert spec.n_events == 500
    assert [u for u, _ in spec.skipped] == [files[1]]


def test_maxchunks_keeps_the_first_chunks_of_each_job(tmp_path: Path, data: Path) -> None:
    files = [str(data / f"part-00{i}.root") for i in range(4)]
    path = jobs_file(
        tmp_path,
        [
            {"id": "a", "files": files, "tree": "Events"},
            {"id": "b", "files": files, "tree": "Events", "events": [400, 2000]},
        ],
    )
    a, b = limit_chunks(load_jobs(path), chunksize=300, maxchunks=3)
    # Chunks cut at file ends: [0, 300) [300, 500) [500, 800).
    assert (a.start, a.stop) == (0, 800)
    # [400, 500) [500, 800) [800, 1000).
    assert (b.start, b.stop) == (400, 1000)


def test_merging_keeps_coffeas_accumulator_types(tmp_path: Path) -> None:
    coffea = pytest.importorskip("coffea.processor", reason="the coffea extra is not installed")
    util = pytest.importorskip("coffea.util")
    a = {"n": coffea.defaultdict_accumulator(int, {"x": 1}), "s": {1}, "c": 2, "l": [1]}
    b = {"n": coffea.defaultdict_accumulator(int, {"x": 2, "y": 5}), "s": {2}, "c": 3, "l": [2]}
    merged = merge_all([a, None, b])
    assert type(merged["n"]) is coffea.defaultdict_accumulator
    assert merged["n"] == {"x": 3, "y": 5}
    assert merged["n"]["z"] == 0  # the default kept
    assert merged["s"] == {1, 2}
    assert merged["c"] == 5
    assert merged["l"] == [1, 2]
    assert a["n"] == {"x": 1}  # inputs untouched
    both = merge(defaultdict(list, {"k": [1]}), defaultdict(list, {"k": [2]}))
    assert type(both) is defaultdict
    assert both["k"] == [1, 2]
    assert both["new"] == []
    # A defaultdict and a dict: coffea's rule, a copy of the more general type.
    assert type(merge(defaultdict(list, {"k": [1]}), {"k": [2]})) is dict
    with pytest.raises(TypeError, match="cannot merge dict with int at key 'c'"):
        merge({"c": {}}, {"c": 1})
    out = tmp_path / "r.coffea"
    write_output(merged, out)
    assert util.load(str(out)) == merged == read_output(out)
