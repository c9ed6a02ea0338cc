"""The catalog: its query language (terms joined by AND, numeric comparisons, free
keywords, unknown keys named) and lookups, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from datasched.service.catalog import Catalog, CatalogQueryError, Term, parse_query, split_meta
from datasched.service.contracts import FileRef
from datasched.service.store.db import Store

DATA = Path(__file__).parents[1] / "data"


def test_a_query_is_terms_keywords_and_comparisons() -> None:
    assert parse_query('year>=2004 system=AuAu "min bias" energy<200.5') == [
        Term("year", ">=", 2004.0),
        Term("system", "=", "auau"),
        Term(None, "=", "min bias"),
        Term("energy", "<", 200.5),
    ]
    assert parse_query("") == []


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("colour=red", "unknown key 'colour'"),
        ("year=recent", "year is a number, got 'recent'"),
        ("system>=AuAu", "system takes only '='"),
        ('"unclosed', "No closing quotation"),
    ],
)
def test_bad_queries_name_the_term_and_the_reason(query: str, reason: str) -> None:
    with pytest.raises(CatalogQueryError, match=reason):
        parse_query(query)


def test_metadata_goes_to_its_columns_and_the_rest_to_extra() -> None:
    assert split_meta(
        {"year": "2004", "energy": 200, "system": "AuAu", "keywords": "a b", "xsec": 1.5}
    ) == {
        "year": 2004,
        "energy_gev": 200.0,
        "system": "AuAu",
        "keywords": ["a", "b"],
        "extra": {"xsec": 1.5},
    }


def test_queries_select_datasets_and_files_in_order(store: Store) -> None:
    cat = Catalog(store)
    cat.put(
        "auau62",
        [FileRef(f"/s/a62/{i}.root", 10, 100, "T", cached_on=("n1",)) for i in range(2)],
        {"year": 2004, "system": "AuAu", "energy": 62.4, "keywords": ["minbias"]},
    )
    cat.put("auau200", [FileRef("/s/a200/0.root", 7, 70, "T")],
            {"year": 2004, "system": "AuAu", "energy": 200, "trigger": "central"})  # fmt: skip
    cat.put("pp", [FileRef("/s/pp/0.root", 5, 50, "T")], {"year": 2005, "system": "pp"})
    assert [d.name for d in cat.datasets("year=2004")] == ["auau200", "auau62"]
    assert [d.name for d in cat.datasets("system=auau energy>100")] == ["auau200"]
    assert [d.name for d in cat.datasets("MinBias")] == ["auau62"]
    assert [d.name for d in cat.datasets("trigger=central year<=2004")] == ["auau200"]
    assert cat.datasets("year>=2006") == []
    files = cat.query("system=AuAu energy<100")
    assert [f.url for f in files] == ["/s/a62/0.root", "/s/a62/1.root"]
    assert files[0] == FileRef("/s/a62/0.root", 10, 100, "T", "auau62", ("n1",))
    assert cat.file("/s/pp/0.root") == FileRef("/s/pp/0.root", 5, 50, "T", "pp")
    assert cat.file("/nowhere.root") is None
    # Putting a dataset again replaces it, files and metadata.
    cat.put("pp", [FileRef("/s/pp/1.root", 6, 60, "T")], {"year": 2006})
    assert [f.url for f in cat.query("dataset=pp")] == ["/s/pp/1.root"]
    assert cat.file("/s/pp/0.root") is None
    (info,) = cat.datasets("dataset=pp")
    assert (info.n_files, info.n_events, info.n_bytes, dict(info.metadata)) == (
        1,
        6,
        60,
        {"year": 2006},
    )


def test_import_reads_the_runtime_catalog_format_and_its_metadata(
    sqlite_store: Store, tmp_path: Path
) -> None:
    (tmp_path / "c.yaml").write_text(
        "datasets:\n  hzz:\n    tree: events\n"
        f"    files: [{DATA / 'uproot-HZZ.root'}]\n"
        "    metadata: {year: 2012, system: pp, keywords: [higgs], generator: pythia}\n"
    )
    cat = Catalog(sqlite_store)
    assert cat.import_yaml(tmp_path / "c.yaml") == ["hzz"]
    (info,) = cat.datasets("higgs year=2012")
    assert info.n_events == 2421
    assert info.metadata["generator"] == "pythia"
