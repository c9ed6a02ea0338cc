"""Splitting a request into elementary jobs: by host (the paper's), by cache contents, by
the core's policy; every file in exactly one job, the cap on files per job respected."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datasched.service.contracts import (
    CommandWork,
    ElementaryJob,
    FileRef,
    InputSpec,
    MetaJobRequest,
    RequestInvalid,
    SplitStrategy,
)
from datasched.service.request import accept_request, split_request


def mjr(max_files: int | None = None) -> MetaJobRequest:
    return MetaJobRequest(
        username="einstein",
        work=CommandWork("ls"),
        inputs=(InputSpec(catalog="a=b"),),
        group="hi",
        max_files_per_job=max_files,
    )


def f(name: str, *nodes: str, n: int = 10) -> FileRef:
    return FileRef(f"/d/{name}", n, 100, cached_on=nodes)


FILES = [f("a", "n2"), f("b", "n1"), f("c"), f("d", "n2", "n1"), f("e", "n2"), f("g")]


def shape(jobs: list[ElementaryJob]) -> list[tuple[str | None, list[str]]]:
    return [(j.node, [x.url.removeprefix("/d/") for x in j.files]) for j in jobs]


def test_by_host_groups_files_by_the_host_that_holds_them() -> None:
    jobs = split_request("r1", mjr(), FILES, SplitStrategy.BY_HOST)
    assert shape(jobs) == [("n1", ["b"]), ("n2", ["a", "d", "e"]), (None, ["c", "g"])]
    assert [j.id for j in jobs] == ["r1.0", "r1.1", "r1.2"]
    assert all(j.user == "einstein" and j.group == "hi" for j in jobs)
    assert jobs[1].n_events == 30


def test_by_host_respects_max_files_per_process() -> None:
    jobs = split_request("r", mjr(2), FILES, SplitStrategy.BY_HOST)
    assert shape(jobs) == [
        ("n1", ["b"]),
        ("n2", ["a", "d"]),
        ("n2", ["e"]),
        (None, ["c", "g"]),
    ]
    # The administrator's cap applies too, the smaller of the two winning.
    assert (
        max(
            len(j.files)
            for j in split_request("r", mjr(2), FILES, SplitStrategy.BY_HOST, max_files_per_job=1)
        )
        == 1
    )


def test_by_cache_follows_the_live_caches_and_spreads_shared_files() -> None:
    holders = {"/d/c": ["n3"], "/d/a": ["n1", "n2"], "/d/d": ["n1", "n2"]}
    jobs = split_request("r", mjr(), FILES, SplitStrategy.BY_CACHE, cache_holders=holders)
    # b on n1 and e on n2 (the catalog's), c on n3 (live); a and d, held twice, fill the
    # gaps one each; g is in no cache.
    assert shape(jobs) == [("n1", ["a", "b"]), ("n2", ["d", "e"]), ("n3", ["c"]), (None, ["g"])]


def test_by_policy_is_one_job_on_no_node() -> None:
    jobs = split_request("r", mjr(), FILES, SplitStrategy.BY_POLICY)
    assert shape(jobs) == [(None, ["a", "b", "c", "d", "e", "g"])]
    assert split_request("r", mjr(), [], SplitStrategy.BY_POLICY) == []
    with pytest.raises(ValueError, match="max_files_per_job"):
        split_request("r", mjr(), FILES, SplitStrategy.BY_POLICY, max_files_per_job=0)


file_lists = st.lists(
    st.tuples(st.integers(0, 30), st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=3)),
    max_size=25,
).map(lambda items: [f(str(i), *nodes) for i, nodes in items])


@settings(max_examples=40, deadline=None)
@given(
    file_lists,
    st.sampled_from(list(SplitStrategy)),
    st.none() | st.integers(1, 5),
    st.dictionaries(
        st.integers(0, 30).map(lambda i: f"/d/{i}"), st.lists(st.sampled_from(["n1", "n5"]))
    ),
)
def test_every_file_in_exactly_one_job_and_deterministic(
    files: list[FileRef],
    strategy: SplitStrategy,
    cap: int | None,
    holders: dict[str, list[str]],
) -> None:
    jobs = split_request("r", mjr(cap), files, strategy, cache_holders=holders)
    counts = Counter(x.url for j in jobs for x in j.files)
    assert set(counts) == {x.url for x in files}
    assert set(counts.values()) <= {1}
    assert all(j.files for j in jobs)
    if cap is not None:
        assert all(len(j.files) <= cap for j in jobs)
    for j in jobs:
        if j.node is not None and strategy is not SplitStrategy.BY_POLICY:
            sources = holders if strategy is SplitStrategy.BY_CACHE else {}
            assert all(j.node in sources.get(x.url, x.cached_on) for x in j.files)
    assert split_request("r", mjr(cap), files, strategy, cache_holders=holders) == jobs


def test_accepting_a_request_parses_checks_and_splits(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.root").write_bytes(b"x")
    text = (
        '<job maxFilesPerProcess="2"><command>ls $FILELIST</command>'
        '<input URL="file:*.root"/></job>'
    )
    mjr, jobs = accept_request("r7", text, "text/xml", None, user="alice", roots=[tmp_path])
    assert mjr.username == "alice"
    assert [(j.id, j.node, len(j.files), j.user) for j in jobs] == [
        ("r7.0", None, 2, "alice"),
        ("r7.1", None, 1, "alice"),
    ]
    other = text.replace("<job ", '<job username="bob" ').replace("*.root", "none.root")
    with pytest.raises(RequestInvalid) as info:
        accept_request("r8", other, "text/xml", None, user="alice", roots=[tmp_path])
    assert [e.field for e in info.value.errors] == ["username", "input[0].path"]
