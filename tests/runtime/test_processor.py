"""The analysis API: naming processors, merging accumulators, writing results whole."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import hist
import numpy as np
import pytest
import uproot

from datasched.runtime.demodata import DimuonMass
from datasched.runtime.outputs import merge, merge_all, write_output
from datasched.runtime.processor import Processor, ProcessorError, load_processor

ANALYSIS = """\
class Counter:
    def process(self, events):
        return {"n": len(events)}

    def postprocess(self, accumulator):
        return {**accumulator, "done": True}


def doubled(events):
    return 2 * len(events)


class Needs:
    def __init__(self, x):
        self.x = x


class Holder:
    inner = Counter


instance = Counter()
not_callable = 42
processor = doubled
"""


@pytest.fixture
def analysis(tmp_path: Path) -> Path:
    (tmp_path / "ana.py").write_text(ANALYSIS)
    return tmp_path


# -- loading ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "result"),
    [
        ("ana.py", 6),  # the file's `processor`, a function
        ("ana.py:doubled", 6),
        ("ana.py:Counter", {"n": 3}),  # a class, instantiated
        ("ana.py:instance", {"n": 3}),  # an object with process()
        ("ana.py:Holder.inner", {"n": 3}),  # a dotted attribute
        (" ana.py:Counter ", {"n": 3}),
    ],
)
def test_load_processor_from_a_file(analysis: Path, ref: str, result: object) -> None:
    proc = load_processor(ref, analysis)
    assert isinstance(proc, Processor)
    assert proc.process([1, 2, 3]) == result


def test_load_processor_by_module_and_absolute_path(analysis: Path, tmp_path: Path) -> None:
    assert isinstance(load_processor("datasched.runtime.demodata:DimuonMass", tmp_path), DimuonMass)
    proc = load_processor(f"{analysis / 'ana.py'}:Counter", Path("/nonexistent"))
    assert proc.process([1]) == {"n": 1}
    post = getattr(proc, "postprocess", None)
    assert callable(post)
    assert post({"n": 1}) == {"n": 1, "done": True}
    assert getattr(load_processor("ana.py", analysis), "postprocess", None) is None
    wrapped = load_processor("numpy:size", tmp_path)  # any callable is a processor
    assert wrapped.process(np.zeros(4)) == 4


def test_files_with_the_same_name_are_different_modules(tmp_path: Path) -> None:
    for name, n in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ana.py").write_text(f"def processor(events):\n    return {n}\n")
    assert load_processor("a/ana.py", tmp_path).process([]) == 1
    assert load_processor("b/ana.py", tmp_path).process([]) == 2
    assert load_processor("ana.py", tmp_path / "a").process([]) == 1  # the same file again


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("missing.py", r"processor 'missing.py': no such file .*missing\.py"),
        ("ana.py:nothing", r"processor 'ana.py:nothing': 'nothing' not found"),
        ("ana.py:Holder.nothing", r"'Holder.nothing' not found"),
        ("ana.py:Needs", r"processor 'ana.py:Needs': Needs\(\) raised TypeError"),
        ("ana.py:not_callable", r"'not_callable' is a int, not a class, a function or an object"),
        ("no_such_module_xyz:P", r"processor 'no_such_module_xyz:P': no module named 'no_such_mod"),
        ("datasched.no_such_xyz:P", r"no module named 'datasched\.no_such_xyz'"),
        ("imports_missing:P", r"cannot import imports_missing: ModuleNotFoundError"),
        ("datasched.runtime.demodata", r"expected module:attr or a \.py file"),
        (":P", r"expected module:attr or a \.py file"),
        ("", r"expected module:attr or a \.py file"),
        ("broken.py", r"processor 'broken.py': .*broken\.py raised ZeroDivisionError"),
    ],
)
def test_load_processor_errors_name_the_ref_and_the_reason(
    analysis: Path, ref: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (analysis / "broken.py").write_text("1 / 0\n")
    (analysis / "imports_missing.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(analysis))
    with pytest.raises(ProcessorError, match=message) as raised:
        load_processor(ref, analysis)
    # A module that is not there is one line; a module whose own import fails shows where.
    if "no_such" in ref:
        assert raised.value.traceback == ""
    if ref.startswith(("broken", "imports_")):
        assert "Traceback" in raised.value.traceback
    # A broken file is not left half-imported: fixed, it loads.
    (analysis / "broken.py").write_text("processor = len\n")
    assert load_processor("broken.py", analysis).process([1, 2]) == 2


# -- merging ---------------------------------------------------------------------------------


def histogram(*values: float) -> hist.Hist[hist.storage.Double]:
    h = hist.Hist.new.Reg(4, 0, 4, name="x").Double()
    h.fill(x=np.array(values))
    return h


def test_merge_histograms_numbers_lists_and_nested_mappings() -> None:
    a: dict[str, Any] = {
        "h": histogram(1.5),
        "n": 1,
        "w": 0.5,
        "l": [1],
        "s": {"x"},
        "sub": {"k": 1, "a": [0]},
    }
    b = {"h": histogram(1.5, 2.5), "n": 2, "w": 0.25, "l": [2], "s": {"y"}, "sub": {"k": 2}, "x": 7}
    out = merge(a, b)
    assert out["h"].values().tolist() == [0, 2, 1, 0]
    assert (out["n"], out["w"], out["l"], out["s"], out["x"]) == (3, 0.75, [1, 2], {"x", "y"}, 7)
    assert out["sub"] == {"k": 3, "a": [0]}
    # The inputs are left as they were.
    assert a["h"].values().tolist() == [0, 1, 0, 0]
    assert a["l"] == [1]
    assert a["sub"] == {
        "k": 1,
        "a": [0],
    }
    assert list(out) == ["h", "n", "w", "l", "s", "sub", "x"]


def test_none_is_the_identity_and_merge_all() -> None:
    h = histogram(0.5)
    assert merge(None, h) is h
    assert merge(h, None) is h
    assert merge(None, None) is None
    assert merge_all([]) is None
    assert merge_all([None, 1, None, 2, 3]) == 6
    assert merge_all(iter([{"a": [1]}, {"a": [2], "b": 1}, {"b": 1}])) == {"a": [1, 2], "b": 2}
    assert merge(np.array([1, 2]), np.array([3, 4])).tolist() == [4, 6]


def test_merge_is_independent_of_grouping() -> None:
    parts = [{"h": histogram(v), "n": 1} for v in (0.5, 1.5, 1.5, 3.5, 2.5)]
    left = merge_all(parts)
    tree = merge(merge_all(parts[:2]), merge(merge_all(parts[2:4]), parts[4]))
    assert left["n"] == tree["n"] == 5
    assert left["h"].values().tolist() == tree["h"].values().tolist() == [1, 2, 1, 1]


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ({"a": 1}, 3, "cannot merge dict with int"),
        (3, {"a": 1}, "cannot merge int with dict"),
        ({"a": {"b": 1}}, {"a": {"b": "x"}}, "cannot merge int with str at key 'a'/'b'"),
        ([1], (2,), "cannot merge list with tuple"),
        (object(), object(), "cannot merge object with object"),
    ],
)
def test_merge_errors_name_the_types(a: object, b: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        merge(a, b)


# -- writing ---------------------------------------------------------------------------------


def test_write_output_pickle(tmp_path: Path) -> None:
    result = {"mass": histogram(0.5, 0.7), "n": 3, "l": [1, 2]}
    for name in ("deep/dir/r.pkl", "r.pickle"):
        write_output(result, tmp_path / name)
        back = pickle.loads((tmp_path / name).read_bytes())
        assert back["n"] == 3
        assert back["l"] == [1, 2]
        assert back["mass"].values().tolist() == [2, 0, 0, 0]


def test_write_output_root_holds_every_histogram(tmp_path: Path) -> None:
    h = histogram(0.5, 1.5, 1.5)
    path = tmp_path / "out" / "r.root"
    write_output({"h": h, "n": 3, "sub": {"g": histogram(3.5)}, "note": "skipped"}, path)
    with uproot.open(path) as f:
        assert sorted(f.keys(cycle=False)) == ["h", "sub", "sub/g"]
        assert f["h"].values().tolist() == [1, 2, 0, 0]
        assert f["sub/g"].values().tolist() == [0, 0, 0, 1]
        assert f["h"].axis().edges().tolist() == [0, 1, 2, 3, 4]
    write_output(h, tmp_path / "single.root")
    with uproot.open(tmp_path / "single.root") as f:
        assert f["result"].values().sum() == 3


def test_a_failing_write_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "r.pkl"
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        write_output({"f": lambda: 1}, path)
    assert list(tmp_path.iterdir()) == []
    # An earlier result stays whole when a later write fails.
    write_output({"n": 1}, path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        write_output({"n": 2, "f": lambda: 1}, path)
    assert pickle.loads(path.read_bytes()) == {"n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.pkl"]
    with pytest.raises(ValueError, match=r"r\.root: the result holds no histogram"):
        write_output({"n": 1}, tmp_path / "r.root")
    with pytest.raises(
        ValueError, match=r"r\.txt: expected a \.pkl, \.pickle, \.root, \.coffea file"
    ):
        write_output({"n": 1}, tmp_path / "r.txt")
    bad = hist.Hist.new.Reg(2, 0, 1).Reg(2, 0, 1).Reg(2, 0, 1).Reg(2, 0, 1).Double()
    with pytest.raises(ValueError, match="between 1 and 3 axes"):  # ROOT has no TH4
        write_output({"ok": histogram(1.0), "bad": bad}, tmp_path / "c.root")
    assert [p.name for p in tmp_path.iterdir()] == ["r.pkl"]
