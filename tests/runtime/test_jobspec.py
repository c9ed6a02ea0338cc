"""Jobs files: every form a job may take, and one clear error (file, job, field) for each kind
of bad input, found before anything runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from datasched.runtime.dataset import load_catalog
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.jobspec import JobSpec, JobSpecError, load_jobs

N_EVENTS = 2_000
DEMO = "datasched.runtime.demodata:DimuonMass"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2,000-event demo dataset in four files (not to be modified by tests)."""
    return write_demo_dataset(tmp_path_factory.mktemp("data"), n_events=N_EVENTS, n_files=4, seed=2)


def write_jobs(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_jobs_file_with_every_form(tmp_path: Path, catalog: Path) -> None:
    data = catalog.parent
    (tmp_path / "ana.py").write_text(
        "def count(events):\n    return {'n': len(events)}\nprocessor = count\n"
    )
    path = write_jobs(
        tmp_path,
        {
            "catalog": str(catalog),
            "defaults": {"processor": DEMO, "output_dir": "out"},
            "jobs": [
                {"id": "late", "dataset": "zmumu", "submit_s": 30},
                {
                    "id": "files",
                    "files": [str(data / "part-00[12].root")],
                    "tree": "Events",
                    "events": [100, 900],
                    "processor": "ana.py",
                    "output": "res/files.root",
                    "submit_s": 2.5,
                },
                {"id": "window", "dataset": "zmumu", "events": [0, 700], "submit_s": 2.5},
                {"id": "first", "dataset": "zmumu", "processor": "ana.py:count"},
            ],
        },
    )
    specs = load_jobs(path)
    assert [s.id for s in specs] == ["first", "files", "window", "late"]  # ties keep file order
    first, files, window, late = specs
    zmumu = load_catalog(catalog)["zmumu"]
    assert late == JobSpec(
        "late", zmumu, 0, N_EVENTS, DEMO, tmp_path / "out" / "late.pkl", 30.0, tmp_path
    )
    assert (window.start, window.stop, window.n_events) == (0, 700, 700)
    assert window.dataset is not None
    assert window.dataset == zmumu
    assert (files.start, files.stop, files.n_events) == (100, 900, 800)
    assert [Path(f.url).name for f in files.dataset.files] == ["part-001.root", "part-002.root"]
    assert files.dataset.n_events == 1_000
    assert files.output == tmp_path / "res" / "files.root"
    assert (files.processor, files.submit_s, files.base_dir) == ("ana.py", 2.5, tmp_path)
    assert (first.processor, first.submit_s, first.output) == (
        "ana.py:count",
        0.0,
        tmp_path / "out" / "first.pkl",
    )


def test_catalog_is_relative_to_the_jobs_file_and_output_dir_defaults_to_it(
    tmp_path: Path, catalog: Path
) -> None:
    (tmp_path / "cat.yaml").write_text(
        catalog.read_text().replace("part-", f"{catalog.parent}/part-")
    )
    specs = load_jobs(
        write_jobs(
            tmp_path,
            {
                "catalog": "cat.yaml",
                "jobs": [{"id": "a", "dataset": "zmumu", "processor": DEMO, "submit_s": 1}],
            },
        )
    )
    assert specs[0].output == tmp_path / "a.pkl"
    assert specs[0].n_events == N_EVENTS


def job_error(tmp_path: Path, catalog: Path, jobs: list[Any], **top: Any) -> str:
    doc = {"catalog": str(catalog), "defaults": {"processor": DEMO}, **top, "jobs": jobs}
    path = write_jobs(tmp_path, doc)
    with pytest.raises(JobSpecError) as info:
        load_jobs(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    return message


OK = {"id": "ok", "dataset": "zmumu"}

JOB_ERRORS: list[tuple[list[Any], str]] = [
    ([{"dataset": "zmumu"}], r"job None \(#1\): field 'id': missing"),
    ([{"id": 7, "dataset": "zmumu"}], r"job 7 \(#1\): field 'id': expected a non-empty string"),
    ([OK, {"id": "ok", "dataset": "zmumu"}], r"job 'ok' \(#2\): field 'id': also the id of job #1"),
    ([OK, "just a string"], r"job #2: expected a mapping"),
    (
        [{"id": "a", "dataset": "zmumu", "colour": "red", "size": 1}],
        r"job 'a' \(#1\): field 'colour': unknown field; also unknown: size",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "files": ["x.root"]}],
        r"job 'a' \(#1\): field 'dataset': give one of 'dataset', 'files' or 'fileset'",
    ),
    ([{"id": "a"}], r"job 'a' \(#1\): field 'dataset': missing"),
    (
        [{"id": "a", "dataset": "nope"}],
        r"job 'a' \(#1\): field 'dataset': unknown dataset 'nope' \(known: zmumu\)",
    ),
    ([{"id": "a", "dataset": ["zmumu"]}], r"job 'a' \(#1\): field 'dataset': expected a dataset"),
    (
        [{"id": "a", "dataset": "zmumu", "tree": "Events"}],
        r"job 'a' \(#1\): field 'tree': only with 'files'",
    ),
    ([{"id": "a", "files": ["*.root"]}], r"job 'a' \(#1\): field 'tree': missing"),
    (
        [{"id": "a", "files": [], "tree": "T"}],
        r"job 'a' \(#1\): field 'files': expected a non-empty",
    ),
    (
        [{"id": "a", "files": ["none-*.root"], "tree": "Events"}],
        r"job 'a' \(#1\): field 'files': none-\*\.root: no file matches",
    ),
    (
        [{"id": "a", "files": ["gone.root"], "tree": "Events"}],
        r"job 'a' \(#1\): field 'files': gone\.root: no such file",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [5]}],
        r"job 'a' \(#1\): field 'events': expected \[start, stop\] as two integers",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [0, 1.5]}],
        r"job 'a' \(#1\): field 'events': expected \[start, stop\]",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [5, 2]}],
        r"job 'a' \(#1\): field 'events': \[5, 2\) ends before it starts",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [0, 2001]}],
        r"job 'a' \(#1\): field 'events': \[0, 2001\) is outside the dataset's events \[0, 2000\)",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [-1, 3]}],
        r"job 'a' \(#1\): field 'events': \[-1, 3\) is outside",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "events": [7, 7]}],
        r"job 'a' \(#1\): field 'events': \[7, 7\) is empty",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "processor": "missing.py"}],
        r"job 'a' \(#1\): field 'processor': processor 'missing.py': no such file",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "processor": "no_such_module_xyz:P"}],
        r"job 'a' \(#1\): field 'processor': .*no module named 'no_such_module_xyz'",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "processor": "datasched.runtime.demodata:Nope"}],
        r"job 'a' \(#1\): field 'processor': .*'Nope' not found",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "processor": 3}],
        r"job 'a' \(#1\): field 'processor': expected module:attr",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "output": "r.txt"}],
        r"job 'a' \(#1\): field 'output': expected a \.pkl, \.pickle, \.root, \.coffea file, "
        r"got r\.txt",
    ),
    (
        [OK, {"id": "b", "dataset": "zmumu", "output": "ok.pkl"}],
        r"job 'b' \(#2\): field 'output': .*ok\.pkl is also job 'ok''s output",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "submit_s": -1}],
        r"job 'a' \(#1\): field 'submit_s': expected a number of seconds >= 0, got -1",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "submit_s": "soon"}],
        r"job 'a' \(#1\): field 'submit_s': expected a number of seconds >= 0, got 'soon'",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "submit_s": float("nan")}],
        r"job 'a' \(#1\): field 'submit_s': expected a number",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "submit_s": True}],
        r"job 'a' \(#1\): field 'submit_s': expected a number",
    ),
    (
        [{"id": "a", "dataset": "zmumu", "user_group": "a,b"}],
        r"job 'a' \(#1\): field 'user_group': expected a name \(no ',' or '='\), got 'a,b'",
    ),
    ([{"id": "a", "dataset": "zmumu", "user": 3}], r"field 'user': expected a name"),
    ([{"id": "a", "dataset": "zmumu", "priority": "high"}], r"field 'priority': expected a number"),
]


@pytest.mark.parametrize(("jobs", "message"), JOB_ERRORS)
def test_job_errors_name_the_job_and_the_field(
    tmp_path: Path, catalog: Path, jobs: list[Any], message: str
) -> None:
    assert re.search(message, job_error(tmp_path, catalog, jobs))


def test_processor_missing_and_defaults(tmp_path: Path, catalog: Path) -> None:
    path = write_jobs(tmp_path, {"catalog": str(catalog), "jobs": [OK]})
    with pytest.raises(JobSpecError, match=r"job 'ok' \(#1\): field 'processor': missing"):
        load_jobs(path)
    message = job_error(tmp_path, catalog, [OK], defaults={"processor": DEMO, "colour": 1})
    assert message.endswith(
        "field 'defaults': unknown colour (expected columns, dataset, events, files, fileset, "
        "output, output_dir, priority, processor, processor_args, schema, schema_options, "
        "submit_s, tree, user, user_group)"
    )


def test_the_processor_is_checked_by_loading_it(tmp_path: Path, catalog: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('no luck')\n")
    (tmp_path / "empty.py").write_text("x = 1\n")
    message = job_error(tmp_path, catalog, [{**OK, "processor": "broken.py"}])
    assert re.search(r"field 'processor': .*broken\.py raised RuntimeError: no luck", message)
    message = job_error(tmp_path, catalog, [{**OK, "processor": "empty.py"}])
    assert re.search(r"field 'processor': .*'processor' not found", message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs: [\n  {id: a\n", r" line \d+, column \d+: not valid YAML"),
        ("- id: a\n", ": expected a mapping with a 'jobs' list"),
        ("catalog: c.yaml\n", ": field 'jobs': missing"),
        ("jobs: []\n", ": field 'jobs': empty"),
        ("jobs: {id: a}\n", ": field 'jobs': expected a list, got dict"),
        ("jobs: [{id: a}]\nwho: me\n", ": field 'who': unknown"),
        (
            "catalog: none.yaml\njobs: [{id: a}]\n",
            r": field 'catalog': .*none\.yaml: no such catalog",
        ),
        ("catalog: [1]\njobs: [{id: a}]\n", ": field 'catalog': expected a path"),
        ("defaults: [1]\njobs: [{id: a}]\n", ": field 'defaults': expected a mapping"),
        ("output_dir: 3\njobs: [{id: a}]\n", ": field 'output_dir': expected a path"),
    ],
)
def test_file_errors_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = write_jobs(tmp_path, text)
    with pytest.raises(JobSpecError, match=f"^{re.escape(str(path))}{message}"):
        load_jobs(path)
    with pytest.raises(JobSpecError, match=r"none-jobs\.yaml: no such file"):
        load_jobs(tmp_path / "none-jobs.yaml")


def test_owner_and_priority_reach_the_spec(tmp_path: Path, catalog: Path) -> None:
    """A job's user, group and priority (what resource scheduling needs): given, from the
    defaults, or the core's defaults."""
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": DEMO, "user_group": "physics"},
        "jobs": [{**OK, "user": "alice", "priority": 2}, {"id": "b", "dataset": "zmumu"}],
    }
    a, b = load_jobs(write_jobs(tmp_path, doc))
    assert (a.user, a.user_group, a.priority) == ("alice", "physics", 2.0)
    assert (b.user, b.user_group, b.priority) == ("user", "physics", 0.0)
