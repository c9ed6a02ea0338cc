"""datasched.safepickle: what analyses return loads equal to what was pickled, over every
pickle protocol and cloudpickle; hostile pickles are refused, one line naming what they
hold, and run nothing (each attack's marker file stays absent, and loaded with trust=True
the same bytes do run it: the attack is real)."""

from __future__ import annotations

import collections
import copyreg
import os
import pickle
import struct
from pathlib import Path
from typing import Any, cast

import awkward as ak
import boost_histogram as bh
import cloudpickle
import hist
import numpy as np
import pytest

from datasched import safepickle
from datasched.safepickle import Refused, loads
from datasched.safepickle.allowed import TABLE

try:  # numpy 2
    from numpy._core.multiarray import _reconstruct, scalar
    from numpy._core.numeric import _frombuffer  # type: ignore[attr-defined]
except ImportError:  # numpy 1
    from numpy.core.multiarray import _reconstruct, scalar  # type: ignore[no-redef]
    from numpy.core.numeric import _frombuffer  # type: ignore[no-redef]


class UserThing:
    """A class of a user's, as a processor's result might hold."""

    def __init__(self, n: int = 1) -> None:
        self.n = n


class Reduces:
    """Pickles as whatever ``__reduce__`` tuple it is given: how an attacker writes a
    pickle calling anything with anything."""

    def __init__(self, *reduce: Any) -> None:
        self.reduce = reduce

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduce


class RunsShell:
    """Unpickling it runs a shell command writing ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"echo ran > {self.marker}",))


class SetsState:
    """Unpickling it writes ``marker`` from its ``__setstate__``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).write_text("ran")


def protocols(obj: Any, low: int = 0) -> list[bytes]:
    """``obj`` pickled with every protocol from ``low``, and with cloudpickle."""
    return [pickle.dumps(obj, protocol=p) for p in range(low, pickle.HIGHEST_PROTOCOL + 1)] + [
        cloudpickle.dumps(obj)
    ]


def refused(data: bytes, *names: str) -> Refused:
    with pytest.raises(Refused) as info:
        loads(data)
    message = str(info.value)
    assert "\n" not in message, message
    assert "trust=True" in message, message
    for name in names:
        assert name in message, message
    return info.value


# -- what analyses return loads equal ----------------------------------------------------------


def filled(h: Any, **extra: Any) -> Any:
    rng = np.random.default_rng(1)
    n = 50
    values = {}
    for axis in h.axes:
        if isinstance(axis, bh.axis.StrCategory):
            values[axis.name] = rng.choice(["a", "b", "c"], n)  # c: grows, or overflows
        elif isinstance(axis, bh.axis.IntCategory):
            values[axis.name] = rng.choice([1, 2, 7], n)
        else:
            values[axis.name] = rng.uniform(-0.5, 3.5, n)
    args = [values[a.name] for a in h.axes]
    h.fill(*args, **{k: v[:n] for k, v in extra.items()})
    return h


@pytest.mark.parametrize("storage", ["Weight", "Double", "Int64"])
def test_hist_histograms_of_every_axis_load_equal_and_still_fill(storage: str) -> None:
    h = (
        hist.Hist.new.Reg(10, 0, 3, name="x")
        .Var([0, 0.5, 2, 3], name="v")
        .StrCat(["a", "b"], name="s", growth=True)
        .IntCat([1, 2], name="i")
    )
    made = getattr(h, storage)()
    weight = {"weight": np.linspace(0.5, 2, 50)} if storage == "Weight" else {}
    h = filled(made, **weight)
    for data in protocols(h, low=2):
        got = loads(data)
        assert type(got) is hist.Hist
        assert got == h
        assert [a.name for a in got.axes] == ["x", "v", "s", "i"]
        assert np.array_equal(got.values(flow=True), h.values(flow=True))
        got.fill(x=[1.0], v=[1.0], s=["a"], i=[1])  # its C++ state is whole
        assert got.sum(flow=True) != h.sum(flow=True)
    stacked = hist.Stack(h, h)
    assert list(loads(pickle.dumps(stacked))) == [h, h]
    named = hist.NamedHist.new.Reg(3, 0, 1, name="x").Double()
    assert loads(pickle.dumps(named)) == named


STORAGES = [
    bh.storage.Double(),
    bh.storage.Int64(),
    bh.storage.AtomicInt64(),
    bh.storage.Unlimited(),
    bh.storage.Weight(),
    bh.storage.Mean(),
    bh.storage.WeightedMean(),
]


@pytest.mark.parametrize("storage", STORAGES, ids=lambda s: type(s).__name__)
def test_boost_histograms_of_every_storage_and_axis_load_equal(storage: Any) -> None:
    h = bh.Histogram(
        bh.axis.Regular(5, 0, 3, metadata={"unit": "GeV"}),
        bh.axis.Regular(4, 1, 10, transform=bh.axis.transform.log),
        bh.axis.Regular(4, 1, 10, transform=bh.axis.transform.Pow(2), circular=False),
        bh.axis.Variable([0, 1, 3], underflow=False),
        bh.axis.Integer(0, 3, growth=True),
        bh.axis.IntCategory([1, 2]),
        bh.axis.StrCategory(["a"], growth=True),
        bh.axis.Boolean(),
        storage=storage,
    )
    args: list[list[Any]] = [
        [1.0, 2.5],
        [2.0, 5.0],
        [2.0, 5.0],
        [0.5, 2.0],
        [1, 2],
        [1, 2],
        ["a", "b"],
        [True, False],
    ]
    sample = [1.0, 3.0] if "Mean" in type(storage).__name__ else None
    h.fill(*args, sample=sample)
    for data in protocols(h, low=2):
        got = loads(data)
        assert got == h
        assert got.axes[0].metadata == {"unit": "GeV"}
    bits = [h.sum(), bh.accumulators.WeightedSum(1, 2), bh.accumulators.Mean(1, 2, 3), h.axes]
    assert loads(pickle.dumps(bits)) == bits


def test_histogram_views_axes_and_accumulators_load() -> None:
    h = hist.Hist.new.Reg(3, 0, 1, name="x").Weight()
    h.fill([0.5], weight=[2.0])
    parts = {
        "view": h.view(),
        "flow": h.view(flow=True),
        "mean": hist.Hist.new.Reg(2, 0, 1).Mean().view(),
        "axes": [hist.axis.Regular(3, 0, 1, name="r"), bh.axis.Variable([0, 1, 5])],
        "edges": h.axes.edges,
    }
    for data in protocols(parts, low=2):
        got = loads(data)
        assert type(got["view"]) is type(h.view())
        assert np.array_equal(got["view"], h.view())
        assert got["axes"] == parts["axes"]
        assert got["edges"][0].tolist() == [0, 1 / 3, 2 / 3, 1]


def test_awkward_arrays_records_jagged_strings_options_unions_load_equal() -> None:
    arrays = [
        ak.Array([{"x": 1, "y": [1.5, 2.0]}, {"x": 2, "y": []}]),
        ak.Array([[1, 2], [], [3]]),
        ak.Array([["a", "bc"], []]),
        ak.Array([1, None, 3]),
        ak.Array([1, "a", [1]]),
        ak.Array([[{"pt": 1.0}], [{"pt": 2.0}, {"pt": 3.0}]]),
    ]
    for data in protocols(arrays, low=0):
        got = loads(data)
        assert [a.to_list() for a in got] == [a.to_list() for a in arrays]
        assert [str(a.type) for a in got] == [str(a.type) for a in arrays]
    record = ak.Record({"x": 1, "y": [1, 2]})
    assert loads(pickle.dumps(record)).to_list() == record.to_list()


DTYPES = [
    "f8", "f4", "i8", "i4", "i2", "u1", "?", "c16", ">f8", "M8[ns]", "m8[s]", "M8", "U5", "S3",
    "V4", [("a", "f8"), ("b", "i4")], np.dtype([("a", "f8"), ("b", "i4")], align=True),
    [(("title", "a"), "f8")], ("f8", (2, 3)), [("a", "O"), ("b", [("c", "i2", (2,))])],
    np.dtype("f8", metadata={"unit": "GeV"}),
]  # fmt: skip


def same_dtype(a: Any, b: Any) -> bool:
    return (a, a.str, a.descr, a.flags, a.alignment, a.isalignedstruct, a.metadata) == (
        b,
        b.str,
        b.descr,
        b.flags,
        b.alignment,
        b.isalignedstruct,
        b.metadata,
    )


@pytest.mark.parametrize("spec", DTYPES, ids=str)
def test_numpy_arrays_and_dtypes_of_every_kind_load_as_pickle_loads_them(spec: Any) -> None:
    dt = np.dtype(spec)
    value = {"a": np.zeros(3, dtype=dt), "t": dt, "f": np.asfortranarray(np.zeros((2, 3), dt))}
    for data in protocols(value):
        got, plain = loads(data), pickle.loads(data)
        assert same_dtype(got["t"], dt)
        for key in ("a", "f"):
            assert same_dtype(got[key].dtype, plain[key].dtype)
            assert got[key].shape == plain[key].shape
            if dt.kind in "mM":  # numpy cannot print generic datetimes
                assert got[key].tobytes() == plain[key].tobytes()
            else:  # not tobytes: numpy leaves an aligned struct's padding as it finds it
                assert repr(got[key]) == repr(plain[key])
        assert got["f"].flags.f_contiguous == plain["f"].flags.f_contiguous


def test_numpy_object_arrays_and_scalars_load_through_the_same_checks(tmp_path: Path) -> None:
    objects = np.array([{"a": 1}, [1, 2], None, "s", np.float32(2), (3,)], dtype=object)
    scalars: list[object] = [
        np.float64(1.5),
        np.int64(2),
        np.bool_(True),
        np.uint8(3),
        np.complex128(1j),
    ]
    scalars += [np.str_("a"), np.datetime64("2020-01-01"), np.float64, np.int32]
    for data in protocols([objects, scalars, np.array(3.0), np.arange(10**5)]):
        o, s, zero_d, big = loads(data)
        assert o.dtype == object
        assert list(o) == list(objects)
        assert s == scalars
        assert [type(x) for x in s] == [type(x) for x in scalars]
        assert zero_d.shape == ()
        assert np.array_equal(big, np.arange(10**5))
    hostile = np.array([RunsShell(tmp_path / "ran")], dtype=object)
    refused(pickle.dumps(hostile), "posix.system")
    assert not (tmp_path / "ran").exists()


def test_numpy_1_names_load_as_numpy_2_names() -> None:
    data = pickle.dumps([np.arange(3.0), np.float64(2.0)], protocol=2)
    old = data.replace(b"numpy._core", b"numpy.core")
    assert old != data or b"numpy.core" in data
    got = loads(old)
    assert np.array_equal(got[0], np.arange(3.0))
    assert got[1] == 2.0


def test_containers_numbers_and_collections_load_equal() -> None:
    value = {
        "nested": {"deep": [1, {"x": (2, 3.5, 1j, 10**30)}], "s": {1, 2}, "f": frozenset("ab")},
        "bytes": [b"x", bytearray(b"y"), "text", None, True, Ellipsis, range(3), slice(1, 2)],
        "collections": [
            collections.OrderedDict(a=1),
            collections.defaultdict(list, a=[1]),
            collections.Counter("abca"),
            collections.deque([1, 2]),
        ],
    }
    for data in protocols(value):
        got = loads(data)
        assert got == value
        assert type(got["collections"][1]) is collections.defaultdict
        assert got["collections"][1]["new"] == []  # its default factory came along


def test_coffea_accumulators_load_equal() -> None:
    processor = pytest.importorskip("coffea.processor")
    acc = processor.dict_accumulator(
        {
            "n": processor.defaultdict_accumulator(int, {"a": 2}),
            "v": processor.value_accumulator(float, 1.5),
            "c": processor.column_accumulator(np.arange(3.0)),
            "l": processor.list_accumulator([1, 2]),
            "s": processor.set_accumulator({"f1"}),
        }
    )
    for data in protocols(acc):
        got = loads(data)
        assert type(got) is processor.dict_accumulator
        assert got["n"] == {"a": 2}
        assert got["n"]["new"] == 0
        assert got["v"].value == 1.5
        assert got["l"] == [1, 2]
        assert np.array_equal(got["c"].value, np.arange(3.0))
        assert got["s"] == {"f1"}


def test_datasched_results_load_as_datasched_writes_them(tmp_path: Path) -> None:
    from datasched.runtime.demodata import _mass_hist
    from datasched.runtime.outputs import merge_all, read_output, write_output

    def packet(values: list[float]) -> dict[str, Any]:
        h = _mass_hist()
        h.fill(mass=values)
        return {"mass": h, "n_events": len(values), "n_pairs": len(values)}

    merged = merge_all([packet([91.0, 89.5]), packet([70.0])])
    for suffix in (".pkl", ".coffea"):
        write_output(merged, tmp_path / f"r{suffix}")
        assert read_output(tmp_path / f"r{suffix}") == merged
    write_output({"mine": UserThing(3)}, tmp_path / "mine.pkl")
    with pytest.raises(Refused, match=r"UserThing"):
        read_output(tmp_path / "mine.pkl")
    assert read_output(tmp_path / "mine.pkl", trust=True)["mine"].n == 3


def test_every_axis_storage_and_histogram_class_of_the_libraries_is_listed() -> None:
    """A new boost-histogram or hist version adding a class shows here, not in a user's
    refused result."""
    import boost_histogram._core.axis as core_axis
    import boost_histogram._core.hist as core_hist

    names = {f"{m}.{n}" for m, ns in TABLE.items() for n in ns}
    classes = [c for c in vars(core_axis).values() if isinstance(c, type)]
    classes += [
        c for n, c in vars(core_hist).items() if isinstance(c, type) and n != "any_multi_cell"
    ]
    classes += [type(s) for s in STORAGES] + [hist.Hist, hist.NamedHist, bh.Histogram]
    for module in (bh.axis, hist.axis):
        classes += [getattr(module, n) for n in ("Regular", "Variable", "Integer", "Boolean")]
        classes += [module.IntCategory, module.StrCategory]
    missing = [f"{c.__module__}.{c.__qualname__}" for c in classes]
    assert sorted(set(missing) - names) == []


# -- hostile pickles are refused and run nothing --------------------------------------------------


def test_a_reduce_to_os_system_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for data in protocols({"h": hist.Hist.new.Reg(2, 0, 1).Double(), "x": RunsShell(marker)}, 2):
        exc = refused(data, "posix.system")
        assert exc.name == "posix.system"
        again = pickle.loads(pickle.dumps(exc))  # it crosses processes whole
        assert (str(again), again.name) == (str(exc), exc.name)
        assert not marker.exists()
    loads(data, trust=True)  # the same bytes, trusted: the attack is real
    assert marker.read_text().strip() == "ran"


def test_a_users_setstate_is_refused_and_trust_loads_a_users_class(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    refused(pickle.dumps(SetsState(marker)), f"{SetsState.__module__}.SetsState")
    assert not marker.exists()
    refused(pickle.dumps({"r": UserThing()}), f"{UserThing.__module__}.UserThing")
    assert loads(pickle.dumps({"r": UserThing(4)}), trust=True)["r"].n == 4


def global_call(module: str, name: str, *args: Any, proto: int = 0) -> bytes:
    """A pickle calling ``module.name(*args)``: GLOBAL (protocol 0) or STACK_GLOBAL (4)."""
    tail = pickle.dumps(args, protocol=proto)
    if proto == 0:
        return f"c{module}\n{name}\n".encode() + tail[:-1] + b"R."
    head, body = tail[:2], tail[2:]
    if body.startswith(pickle.FRAME):
        body = body[9:]
    names = b"".join(b"\x8c" + bytes([len(s)]) + s.encode() for s in (module, name))
    return head + names + pickle.STACK_GLOBAL + body[:-1] + b"R."


GADGETS = [
    ("builtins", "eval"), ("builtins", "exec"), ("builtins", "getattr"), ("builtins", "__import__"),
    ("builtins", "compile"), ("builtins", "open"), ("builtins", "type"), ("builtins", "globals"),
    ("builtins", "breakpoint"), ("posix", "system"), ("os", "system"), ("os", "popen"),
    ("subprocess", "Popen"), ("subprocess", "check_output"), ("functools", "partial"),
    ("operator", "attrgetter"), ("operator", "methodcaller"), ("pickle", "loads"),
    ("_pickle", "loads"), ("copyreg", "__newobj__"), ("copyreg", "_reconstructor.__globals__"),
    ("numpy", "load"), ("numpy", "frombuffer"), ("numpy.lib.format", "read_array"),
    ("numpy.testing._private.utils", "runstring"), ("numpy", "core.multiarray._reconstruct"),
    ("numpy.ctypeslib", "as_array"), ("builtins", "dict.fromkeys"),
    ("collections", "OrderedDict.__init__"), ("hist.hist", "Hist.__init__"),
    ("hist", "Hist"), ("boost_histogram", "Histogram"), ("awkward", "from_buffers"),
    ("awkward._pickle", "get_custom_reducer"), ("coffea.util", "load"),
    ("cloudpickle.cloudpickle", "_make_function"), ("datasched.runtime.outputs", "write_output"),
]  # fmt: skip


@pytest.mark.parametrize(("module", "name"), GADGETS, ids=lambda x: x)
@pytest.mark.parametrize("proto", [0, 4])
def test_a_global_off_the_list_is_refused_by_name(
    module: str, name: str, proto: int, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()"
    exc = refused(global_call(module, name, code, proto=proto), f"{module}.{name}")
    assert exc.name == f"{module}.{name}"
    assert not marker.exists()


def test_a_hand_written_protocol_0_eval_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    data = f"c__builtin__\neval\n(S\"open({str(marker)!r}, 'w').close()\"\ntR.".encode()
    refused(data, "builtins.eval")
    assert not marker.exists()
    pickle.loads(data)  # plain pickle runs it
    assert marker.exists()


def test_copyreg_reconstructor_makes_only_listed_plain_classes(tmp_path: Path) -> None:
    def reconstruct(cls: str, base: str, state: str = "N") -> bytes:
        return f"ccopyreg\n_reconstructor\n(c{cls}\nc{base}\n{state}tR.".encode()

    counter = reconstruct("collections\nCounter", "__builtin__\ndict", "(dp0\nVa\nI1\ns")
    assert loads(counter) == collections.Counter(a=1)
    refused(reconstruct(f"{UserThing.__module__}\nUserThing", "__builtin__\nobject"), "UserThing")
    # A C++ class made by object.__new__ aborts the process under plain pickle.
    refused(
        reconstruct("boost_histogram._core.hist\nany_double", "__builtin__\nobject"), "any_double"
    )
    refused(reconstruct("hist.hist\nHist", "__builtin__\ndict", "(dp0\n"), "hist.hist.Hist")
    refused(reconstruct("collections\nCounter", "__builtin__\neval"), "builtins.eval")


def test_persistent_ids_and_extension_codes_are_refused() -> None:
    class Persists(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return "the-id" if obj == "x" else None

    import io

    buf = io.BytesIO()
    Persists(buf, protocol=4).dump({"a": "x"})
    refused(buf.getvalue(), "persistent id")
    refused(b"Pthe-id\n.", "persistent id")
    refused(b"\x80\x02\x82\x01.", "extension code 1")
    copyreg.add_extension("posix", "system", 241)
    try:
        data = pickle.dumps(os.system, protocol=2)
        assert pickle.EXT1 in data
        assert pickle.loads(data) is os.system  # plain pickle caches the registry's entry
        refused(data, "extension code 241")
    finally:
        copyreg.remove_extension("posix", "system", 241)


def test_state_is_never_given_to_a_class_function_or_module() -> None:
    # Counter.most_common = dict, for the whole process, through BUILD's slot state.
    build = (
        b"\x80\x02ccollections\nCounter\nN}X\x0b\x00\x00\x00most_commonc__builtin__\ndict\ns\x86b."
    )
    refused(build, "collections.Counter")
    setitem = b"\x80\x02ccollections\nOrderedDict\nX\x01\x00\x00\x00aK\x01s."
    refused(setitem, "collections.OrderedDict")
    on_function = b"\x80\x02cboost_histogram.axis.transform\n_internal_conversion\n"
    on_function += b"}X\x01\x00\x00\x00aK\x01sb."
    refused(on_function, "_internal_conversion")
    most_common: object = collections.Counter.most_common
    assert most_common is not dict


def test_numpy_gadgets_over_raw_memory_are_refused() -> None:
    # A field 100 bytes into an 8-byte item: an array then reads outside its buffer.
    oob = Reduces(
        np.dtype,
        ("V8", False, True),
        (3, "|", None, ("a",), {"a": (np.dtype("f8"), 100)}, 8, 1, 16),
    )
    refused(pickle.dumps(oob), "numpy.dtype")
    refused(pickle.dumps(Reduces(_frombuffer, (b"\0" * 8, oob, (1,), "C"))), "numpy.dtype")
    # An object field flagged as plain bytes: its pointers would come from the bytes.
    flags = Reduces(
        np.dtype, ("V8", False, True), (3, "|", None, ("a",), {"a": (np.dtype("O"), 0)}, 8, 1, 0)
    )
    refused(
        pickle.dumps(Reduces(_frombuffer, (b"A" * 8, flags, (1,), "C"))),
        "objects made from raw bytes",
    )
    refused(pickle.dumps(Reduces(_frombuffer, (b"A" * 8, np.dtype("O"), (1,), "C"))), "_frombuffer")
    refused(pickle.dumps(Reduces(np.ndarray, ((1,), np.dtype("O"), b"A" * 8))), "numpy.ndarray")
    refused(pickle.dumps(Reduces(scalar, (np.dtype([("a", "O")]), b"A" * 8))), "scalar")
    refused(
        pickle.dumps(Reduces(_reconstruct, (collections.OrderedDict, (0,), b"b"))), "_reconstruct"
    )
    raw = Reduces(_reconstruct, (np.ndarray, (0,), b"b"), (1, (1,), np.dtype("O"), False, b"A" * 8))
    with pytest.raises(TypeError, match="object pickle not returning list"):
        loads(pickle.dumps(raw))  # numpy's own check
    twice = Reduces(np.dtype, ("f8", False, True), (3, ">", None, None, None, 99, -1, 0))
    refused(pickle.dumps(twice), "items of 8 bytes, the state says 99")
    assert np.dtype("f8").byteorder == "="  # the process's float64 untouched


class NewObj:
    """Pickles as ``NEWOBJ cls`` then ``BUILD state`` (when given one): how pickle makes a
    boost-histogram C++ object, with whatever state an attacker gives it."""

    def __init__(self, cls: type, state: Any = None) -> None:
        self.cls, self.state = cls, state

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # pickle checks that NEWOBJ's class is the object's
        return self.cls

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        newobj = vars(copyreg)["__newobj__"]
        return (
            (newobj, (self.cls,), self.state) if self.state is not None else (newobj, (self.cls,))
        )


def test_boost_histogram_states_that_would_corrupt_memory_are_refused() -> None:
    h = bh.Histogram(bh.axis.Regular(1000, 0, 1))
    # boost-histogram's stubs leave out its C++ histogram's __getstate__ (a tuple).
    state = list(cast("tuple[Any, ...]", h._hist.__getstate__()))
    short = [*state[:-1], np.zeros(3)]
    refused(pickle.dumps(NewObj(type(h._hist), tuple(short))), "3 stored values for 1002 cells")
    wrong_type = [*state[:-1], np.zeros(1002, np.int8)]
    refused(pickle.dumps(NewObj(type(h._hist), tuple(wrong_type))), "not an array of float64")
    axis = bh.axis.Variable([0, 1, 2])._ax
    refused(pickle.dumps(NewObj(type(axis), (0, np.zeros(0), {}))), "an axis of -1 bins")
    unbuilt = NewObj(type(h._hist))
    refused(pickle.dumps({"h": unbuilt}), "without its state")
    wrapper = NewObj(bh.Histogram, (0, {"_hist": unbuilt, "metadata": None}))
    with pytest.raises((Refused, AttributeError, TypeError)):
        loads(pickle.dumps(wrapper))
    legit = loads(pickle.dumps(NewObj(type(h._hist), tuple(state))))
    assert legit.size() == 1002


def test_awkward_buffers_that_point_outside_are_refused() -> None:
    a = ak.Array([[1, 2], [3]])
    func, args = a.__reduce_ex__(4)
    form, length, container, *rest = args
    key = next(k for k in container if k.endswith("offsets"))
    bad = dict(container, **{key: np.array([2, 1, 3], np.int64)})  # a list ending before it starts
    refused(pickle.dumps(Reduces(func, (form, length, bad, *rest))), "awkward finds invalid")
    past = dict(container, **{key: np.array([0, 2, 1000], np.int64)})
    with pytest.raises(TypeError, match="less than size of form"):  # awkward's own check
        loads(pickle.dumps(Reduces(func, (form, length, past, *rest))))
    calls = dict(container, **{key: collections.OrderedDict})
    refused(pickle.dumps(Reduces(func, (form, length, calls, *rest))), "not bytes or plain arrays")
    with pytest.raises((Refused, ValueError, TypeError)):
        loads(pickle.dumps(Reduces(func, (form, 10**6, container, *rest))))


def test_listed_functions_refuse_arguments_their_pickles_never_give() -> None:
    import _codecs

    from boost_histogram.axis.transform import _internal_conversion

    refused(pickle.dumps(Reduces(_codecs.encode, ("x", "rot13"))), "_codecs.encode")
    refused(pickle.dumps(Reduces(_internal_conversion, ("__spec__",))), "not one of its own")
    refused(pickle.dumps(Reduces(np.ndarray, ((2,),))), "may hold, not call")


def test_load_reads_a_path_or_an_open_file(tmp_path: Path) -> None:
    path = tmp_path / "r.pkl"
    path.write_bytes(pickle.dumps({"n": 1}))
    assert safepickle.load(path) == {"n": 1} == safepickle.load(str(path))
    with path.open("rb") as fh:
        assert safepickle.load(fh) == {"n": 1}
    path.write_bytes(pickle.dumps({"u": UserThing()}))
    with pytest.raises(Refused):
        safepickle.load(path)


def test_the_allow_list_names_no_module_prefix_and_no_dangerous_builtin() -> None:
    names = safepickle.allowed_names()
    assert "builtins.dict" in names
    assert "numpy._core.multiarray._reconstruct" in names
    assert "numpy.core.multiarray._reconstruct" in names
    for bad in ("builtins.eval", "builtins.getattr", "builtins.__import__", "numpy.load"):
        assert bad not in names
    assert struct.calcsize("P") == 8  # the gadgets above assume 8-byte pointers
