"""Datasets: event numbering across files, opening files, file lists, catalogs and reading
entry ranges (the runtime's view of tertiary storage)."""

from __future__ import annotations

import glob
import pickle
import re
from pathlib import Path

import awkward as ak
import hist
import pytest
import uproot
import yaml

from datasched.runtime.dataset import (
    CatalogError,
    Dataset,
    DatasetError,
    FileEntry,
    expand_files,
    load_catalog,
    open_dataset,
    read_events,
)
from datasched.runtime.demodata import write_demo_dataset

N_EVENTS = 2_000
N_FILES = 4


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2,000-event demo dataset in four files (not to be modified by tests)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("data"), n_events=N_EVENTS, n_files=N_FILES, seed=3
    )


def dataset(*counts: int) -> Dataset:
    return Dataset(
        "d", tuple(FileEntry(f"f{i}.root", "T", n, 10 * n) for i, n in enumerate(counts))
    )


# -- numbering -------------------------------------------------------------------------------

DS = dataset(5, 0, 7, 3)  # global events: f0 [0, 5), f1 empty, f2 [5, 12), f3 [12, 15)


def test_sizes() -> None:
    assert (DS.n_events, DS.n_bytes, DS.bytes_per_event) == (15, 150, 10.0)
    assert (dataset().n_events, dataset().bytes_per_event) == (0, 0.0)
    assert [DS.file_range(i) for i in range(4)] == [(0, 5), (5, 5), (5, 12), (12, 15)]


@pytest.mark.parametrize(
    ("start", "stop", "pieces"),
    [
        (0, 15, [(0, 0, 5), (2, 0, 7), (3, 0, 3)]),  # everything, the empty file skipped
        (3, 13, [(0, 3, 5), (2, 0, 7), (3, 0, 1)]),  # spans three files
        (5, 12, [(2, 0, 7)]),  # exactly one file
        (0, 5, [(0, 0, 5)]),
        (4, 6, [(0, 4, 5), (2, 0, 1)]),  # one event either side of a boundary
        (12, 15, [(3, 0, 3)]),  # the last file, up to the end
        (14, 15, [(3, 2, 3)]),
        (0, 1, [(0, 0, 1)]),
        (4, 4, []),  # empty ranges
        (5, 5, []),
        (15, 15, []),
        (0, 0, []),
    ],
)
def test_locate(start: int, stop: int, pieces: list[tuple[int, int, int]]) -> None:
    assert DS.locate(start, stop) == pieces


@pytest.mark.parametrize(("start", "stop"), [(-1, 3), (0, 16), (16, 16), (7, 6), (20, 30)])
def test_locate_rejects_ranges_outside_the_dataset(start: int, stop: int) -> None:
    with pytest.raises(ValueError, match=re.escape(f"[{start}, {stop}) outside the dataset")):
        DS.locate(start, stop)


def test_locate_partitions_every_range_exactly() -> None:
    ds = dataset(3, 0, 0, 1, 4, 2, 0)
    for start in range(ds.n_events + 1):
        for stop in range(start, ds.n_events + 1):
            covered: list[int] = []
            for i, a, b in ds.locate(start, stop):
                assert 0 <= a < b <= ds.files[i].n_events
                first, _ = ds.file_range(i)
                covered.extend(range(first + a, first + b))
            assert covered == list(range(start, stop))


def test_file_index_at() -> None:
    assert [DS.file_index_at(e) for e in range(15)] == [0] * 5 + [2] * 7 + [3] * 3
    for bad in (-1, 15):
        with pytest.raises(ValueError, match=f"event {bad} outside the dataset"):
            DS.file_index_at(bad)
    with pytest.raises(IndexError, match="file index 4"):
        DS.file_range(4)
    with pytest.raises(IndexError, match="file index -1"):
        DS.file_range(-1)


def test_datasets_are_values() -> None:
    again = pickle.loads(pickle.dumps(DS))
    assert again == DS
    assert hash(again) == hash(DS)
    assert again.locate(3, 13) == DS.locate(3, 13)
    assert Dataset("d", [FileEntry("f", "T", 2, 1)]).files == (FileEntry("f", "T", 2, 1),)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="f: field 'n_events': expected an int >= 0, got -1"):
        FileEntry("f", "T", -1, 0)
    with pytest.raises(ValueError, match="field 'n_bytes'"):
        FileEntry("f", "T", 1, 1.5)  # type: ignore[arg-type]


# -- opening files ---------------------------------------------------------------------------


def test_open_dataset_counts_entries_and_bytes(catalog: Path) -> None:
    listed = load_catalog(catalog)["zmumu"]
    paths = [f.url for f in listed.files]
    for urls in (paths, [f"file://{p}" for p in paths]):
        ds = open_dataset("z", urls, "Events")
        assert ds.name == "z"
        assert [f.url for f in ds.files] == urls
        assert [(f.n_events, f.n_bytes, f.tree) for f in ds.files] == [
            (f.n_events, Path(f.url).stat().st_size, "Events") for f in listed.files
        ]
        assert ds.n_events == N_EVENTS


def test_open_dataset_errors_name_the_file(tmp_path: Path, catalog: Path) -> None:
    good = str(catalog.parent / "part-000.root")
    missing = str(tmp_path / "missing.root")
    with pytest.raises(DatasetError, match=f"{re.escape(missing)}: no such file"):
        open_dataset("x", [good, missing], "Events")
    junk = tmp_path / "junk.root"
    junk.write_text("not ROOT")
    with pytest.raises(DatasetError, match=f"{re.escape(str(junk))}: not a readable ROOT file"):
        open_dataset("x", [str(junk)], "Events")
    with pytest.raises(DatasetError, match=f"{re.escape(good)}: no tree 'Nope'"):
        open_dataset("x", [good], "Nope")
    histo = tmp_path / "histo.root"
    with uproot.recreate(histo) as f:
        f["h"] = hist.Hist.new.Reg(2, 0, 1).Double()
    with pytest.raises(DatasetError, match="'h' is a TH1D, not a tree"):
        open_dataset("x", [str(histo)], "h")
    with pytest.raises(DatasetError, match="dataset 'x': no files"):
        open_dataset("x", [], "Events")


# -- file lists ------------------------------------------------------------------------------


def test_expand_files(tmp_path: Path) -> None:
    base = tmp_path / "odd [dir]*"  # glob characters in the base directory are literal
    (base / "data").mkdir(parents=True)
    for name in ("b.root", "a.root", "c.txt"):
        (base / "data" / name).write_bytes(b"")
    (base / "data" / "sub.root").mkdir()  # a directory is not a file
    data = base / "data"
    assert expand_files(
        [
            "data/c.txt",
            "data/*.root",
            str(data / "b.root"),
            f"file://{data / 'a.root'}",
            f"{glob.escape(str(data))}/[ab].root",
            "root://eos.example//store/f.root",
            "simplecache::https://example.org/g.root",
        ],
        base,
    ) == [
        str(data / "c.txt"),
        str(data / "a.root"),
        str(data / "b.root"),
        str(data / "b.root"),
        str(data / "a.root"),
        str(data / "a.root"),
        str(data / "b.root"),
        "root://eos.example//store/f.root",
        "simplecache::https://example.org/g.root",
    ]
    assert expand_files([], base) == []


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("data/*.parquet", r"data/\*\.parquet: no file matches"),
        ("data/none.root", "data/none.root: no such file"),
        ("data", "data: no such file"),  # a directory
        ("file:///nonexistent/x.root", "file:///nonexistent/x.root: no such file"),
    ],
)
def test_expand_files_errors_name_the_pattern(tmp_path: Path, pattern: str, message: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.root").write_bytes(b"")
    with pytest.raises(DatasetError, match=message):
        expand_files(["data/a.root", pattern], tmp_path)


# -- catalogs --------------------------------------------------------------------------------


def test_catalog_with_counts_opens_no_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "datasets": {
                    "a": {
                        "tree": "Events",
                        "files": [
                            {"url": "x/one.root", "n_events": 10, "n_bytes": 100},
                            {"url": "root://host//two.root", "n_events": 5, "n_bytes": 70},
                        ],
                    },
                    "b": {
                        "tree": "T",
                        "files": [{"url": "/abs/f.root", "n_events": 0, "n_bytes": 0}],
                    },
                }
            }
        )
    )
    cat = load_catalog(path)
    assert list(cat) == ["a", "b"]
    assert cat["a"] == Dataset(
        "a",
        (
            FileEntry(str(tmp_path / "x" / "one.root"), "Events", 10, 100),
            FileEntry("root://host//two.root", "Events", 5, 70),
        ),
    )
    assert cat["b"].n_events == 0


def test_catalog_mixes_paths_globs_and_counts_in_order(tmp_path: Path, catalog: Path) -> None:
    data = catalog.parent
    listed = load_catalog(catalog)["zmumu"].files
    path = tmp_path / "catalog.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "datasets": {
                    "z": {
                        "tree": "Events",
                        "files": [
                            str(data / "part-003.root"),
                            {"url": str(data / "part-000.root"), "n_events": 7, "n_bytes": 9},
                            str(data / "part-00[12].root"),
                            {"url": f"file://{data / 'part-000.root'}"},  # counts: opened
                        ],
                    }
                }
            }
        )
    )
    ds = load_catalog(path)["z"]
    assert [(Path(f.url.removeprefix("file://")).name, f.n_events) for f in ds.files] == [
        ("part-003.root", listed[3].n_events),
        ("part-000.root", 7),
        ("part-001.root", listed[1].n_events),
        ("part-002.root", listed[2].n_events),
        ("part-000.root", listed[0].n_events),
    ]


CATALOG_ERRORS: list[tuple[object, str]] = [
    ({"tree": "T"}, "dataset 'd': field 'files': missing"),
    ({"files": ["a.root"]}, "dataset 'd': field 'tree': missing"),
    ({"tree": 3, "files": ["a.root"]}, "dataset 'd': field 'tree': expected a tree name"),
    ({"tree": "T", "files": []}, "dataset 'd': field 'files': expected a non-empty list"),
    ({"tree": "T", "files": 3}, "dataset 'd': field 'files': expected a non-empty list"),
    # files as {path: tree}, coffea's form: each value must be a tree name
    ({"tree": "T", "files": {"a": 1}}, "dataset 'd': field 'files' #1: expected a tree name"),
    ({"tree": "T", "files": ["a.root"], "tres": 1}, "dataset 'd': field 'tres': unknown"),
    (["a.root"], "dataset 'd': expected a mapping"),
    ({"tree": "T", "files": ["nope.root"]}, r"dataset 'd': field 'files' #1: nope\.root: no such"),
    (
        {"tree": "T", "files": ["*.nope"]},
        r"dataset 'd': field 'files' #1: \*\.nope: no file matches",
    ),
    ({"tree": "T", "files": [3]}, "dataset 'd': field 'files' #1: expected a path"),
    (
        {"tree": "T", "files": [{"url": "a", "n_events": 1, "n_bytes": 1}, {"n_events": 1}]},
        "dataset 'd': field 'files' #2: field 'url': missing",
    ),
    (
        {"tree": "T", "files": [{"url": "a", "n_events": 1}]},
        "dataset 'd': field 'files' #1: field 'n_bytes': missing",
    ),
    (
        {"tree": "T", "files": [{"url": "a", "n_events": -1, "n_bytes": 1}]},
        "dataset 'd': field 'files' #1: field 'n_events': expected an int >= 0, got -1",
    ),
    (
        {"tree": "T", "files": [{"url": "a", "n_events": 1.5, "n_bytes": 1}]},
        "dataset 'd': field 'files' #1: field 'n_events': expected an int >= 0, got 1.5",
    ),
    (
        {"tree": "T", "files": [{"url": "a", "n_events": 1, "n_bytes": 1, "size": 3}]},
        "dataset 'd': field 'files' #1: field 'size': unknown",
    ),
]


@pytest.mark.parametrize(("spec", "message"), CATALOG_ERRORS)
def test_catalog_errors_name_catalog_dataset_and_field(
    tmp_path: Path, spec: object, message: str
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"d": spec}}))
    with pytest.raises(CatalogError, match=f"^{re.escape(str(path))}: {message}"):
        load_catalog(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("datasets:\n  d: {tree: T\n", r" line \d+, column \d+: not valid YAML"),
        ("- a\n- b\n", "expected a mapping with a 'datasets' field"),
        ("other: 1\n", "field 'datasets': missing"),
        ("datasets: {}\n", "field 'datasets': missing, empty"),
    ],
)
def test_catalog_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=f"^{re.escape(str(path))}.*{message}"):
        load_catalog(path)
    with pytest.raises(CatalogError, match=r"none\.yaml: no such catalog"):
        load_catalog(tmp_path / "none.yaml")


# -- reading ---------------------------------------------------------------------------------


def test_read_events_returns_exactly_the_requested_entries(catalog: Path) -> None:
    ds = load_catalog(catalog)["zmumu"]
    start, stop = 300, 1_200  # spans three of the four files
    pieces = ds.locate(start, stop)
    assert len(pieces) == 3
    numbers: list[int] = []
    for i, a, b in pieces:
        events = read_events(ds.files[i].url, ds.files[i].tree, a, b)
        assert len(events) == b - a
        numbers.extend(events["event"].to_list())
    assert numbers == list(range(start, stop))
    f = ds.files[1]
    some = read_events(f"file://{f.url}", f.tree, 2, 5, columns=["event", "Muon_pt"])
    assert some.fields == ["event", "Muon_pt"]
    assert some["event"].to_list() == [ds.file_range(1)[0] + k for k in (2, 3, 4)]
    assert len(read_events(f.url, f.tree, 7, 7)) == 0


def test_read_events_refuses_short_reads(catalog: Path) -> None:
    ds = load_catalog(catalog)["zmumu"]
    f = ds.files[0]
    with pytest.raises(DatasetError, match=f"entries \\[0, {f.n_events + 1}\\) outside"):
        read_events(f.url, f.tree, 0, f.n_events + 1)
    with pytest.raises(DatasetError, match="no tree 'Nope'"):
        read_events(f.url, "Nope", 0, 1)
    with pytest.raises(ValueError, match=r"\[5, 2\) is not a range"):
        read_events(f.url, f.tree, 5, 2)


def test_read_events_from_parquet(tmp_path: Path, catalog: Path) -> None:
    f = load_catalog(catalog)["zmumu"].files[2]
    events = read_events(f.url, f.tree, 0, f.n_events)
    path = tmp_path / "part.parquet"
    ak.to_parquet(events, path)
    got = read_events(str(path), "ignored", 10, 20)
    assert got.to_list() == events[10:20].to_list()
    assert read_events(str(path), "", 0, 3, columns=["event"]).fields == ["event"]
    with pytest.raises(DatasetError, match="outside the file's"):
        read_events(str(path), "", 0, f.n_events + 1)
