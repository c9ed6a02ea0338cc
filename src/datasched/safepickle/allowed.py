"""What a result's pickle may name: each class and function by module and name.

Listed one by one, not by module prefix, so that a library's helpers (``numpy.load``,
``boost_histogram``'s internals) never come along with its data classes. What each entry
may do:

* ``CLASS``: instantiated (called, or created by ``NEWOBJ``) and given its state;
* ``FUNCTION``: called, with its arguments checked (:mod:`datasched.safepickle.states`);
* ``VALUE``: only referred to: numpy's array classes (numpy's pickles pass them to
  ``_reconstruct``; called directly they would wrap raw bytes as object pointers), ``object``
  (a base class for ``copyreg._reconstructor``), ``Ellipsis``.

The list is what analyses return (docs/service.md, "Results and user code"): Python's
containers and numbers, numpy arrays, dtypes and scalars, awkward arrays, hist and
boost-histogram histograms with their axes, storages, accumulators and views, and coffea's
accumulators. ``datasched.runtime.outputs`` defines no class: a datasched result is one of
these (a dict of histograms and numbers, usually). A class a result needs beyond this list
is added here, with a test in tests/test_safepickle.py that round-trips it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CLASS", "FUNCTION", "VALUE", "Entry", "allowed_names", "lookup"]

Role = Literal["class", "function", "value"]
CLASS: Role = "class"
FUNCTION: Role = "function"
VALUE: Role = "value"


def _each(role: Role, *names: str) -> dict[str, Role]:
    return dict.fromkeys(names, role)


_NUMPY_SCALARS = _each(
    CLASS,
    *("bool", "bool_", "int8", "int16", "int32", "int64", "longlong"),
    *("uint8", "uint16", "uint32", "uint64", "ulonglong"),
    *("float16", "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble"),
    *("str_", "bytes_", "datetime64", "timedelta64"),
)
_BH_CORE_AXES = _each(
    CLASS,
    "boolean",
    *("category_int", "category_int_growth", "category_int_none"),
    *("category_str", "category_str_growth", "category_str_none"),
    *("integer_circular", "integer_growth", "integer_none", "integer_oflow", "integer_uflow"),
    "integer_uoflow",
    *("regular_circular", "regular_none", "regular_oflow", "regular_pow", "regular_trans"),
    *("regular_uflow", "regular_uoflow", "regular_uoflow_growth"),
    *("variable_circular", "variable_none", "variable_oflow", "variable_uflow"),
    *("variable_uoflow", "variable_uoflow_growth"),
)
_AXES = ("Regular", "Variable", "Integer", "IntCategory", "StrCategory", "Boolean")
_NUMPY_CORE = {
    "multiarray": {"_reconstruct": FUNCTION, "scalar": FUNCTION},
    "numeric": {"_frombuffer": FUNCTION},
}

TABLE: dict[str, dict[str, Role]] = {
    "builtins": {
        **_each(CLASS, "dict", "list", "set", "frozenset", "tuple", "int", "float", "complex"),
        **_each(CLASS, "str", "bytes", "bytearray", "bool", "slice", "range"),
        **_each(VALUE, "object", "Ellipsis", "NotImplemented"),
    },
    "collections": _each(CLASS, "OrderedDict", "defaultdict", "Counter", "deque"),
    "copyreg": {"_reconstructor": FUNCTION},
    "_codecs": {"encode": FUNCTION},
    "numpy": {"ndarray": VALUE, "dtype": CLASS, **_NUMPY_SCALARS},
    # numpy 2 names its helpers numpy._core.*, numpy 1 numpy.core.*: either loads.
    **{
        f"numpy.{core}.{mod}": names
        for core in ("core", "_core")
        for mod, names in _NUMPY_CORE.items()
    },
    "awkward._pickle": _each(
        FUNCTION,
        "unpickle_array_schema_1",
        "unpickle_array_schema_2",
        "unpickle_record_schema_1",
        "unpickle_record_schema_2",
    ),
    "hist.hist": {"Hist": CLASS},
    "hist.namedhist": {"NamedHist": CLASS},
    "hist.stack": {"Stack": CLASS},
    "hist.axestuple": {"NamedAxesTuple": CLASS},
    "hist.axis": _each(CLASS, *_AXES),
    "boost_histogram.histogram": {"Histogram": CLASS},
    "boost_histogram.axis": _each(CLASS, *_AXES, "AxesTuple", "ArrayTuple"),
    "boost_histogram.axis.transform": {
        "Function": CLASS,
        "Pow": CLASS,
        "_internal_conversion": FUNCTION,
    },
    "boost_histogram.storage": _each(
        CLASS, "Double", "Int64", "AtomicInt64", "Unlimited", "Weight", "Mean", "WeightedMean"
    ),
    "boost_histogram.accumulators": _each(CLASS, "Sum", "WeightedSum", "Mean", "WeightedMean"),
    "boost_histogram.view": _each(VALUE, "WeightedSumView", "MeanView", "WeightedMeanView"),
    "boost_histogram._core.hist": _each(
        CLASS,
        *("any_double", "any_int64", "any_atomic_int64", "any_unlimited"),
        *("any_weight", "any_mean", "any_weighted_mean"),
    ),
    "boost_histogram._core.axis": _BH_CORE_AXES,
    "boost_histogram._core.axis.transform": _each(
        CLASS, "func_transform", "id", "log", "pow", "sqrt"
    ),
    "coffea.processor.accumulator": _each(
        CLASS,
        *("value_accumulator", "list_accumulator", "set_accumulator", "dict_accumulator"),
        *("defaultdict_accumulator", "column_accumulator"),
    ),
}
"""module → name → role. Names are exact: a pickle naming ``numpy`` ``core.multiarray.x``
(a dotted path, as protocol 4 allows) matches nothing."""


@dataclass(frozen=True, slots=True)
class Entry:
    """An object a pickle named, found on the list."""

    obj: Any
    name: str
    """``module.name`` as the pickle gave it."""
    role: Role


def _import(module: str) -> Any:
    # numpy 2 keeps numpy.core as a shim that warns on use: numpy._core first, then the
    # other spelling (numpy 1).
    if module.startswith(("numpy.core.", "numpy._core.")):
        tail = module.split(".", 2)[2]
        for base in ("numpy._core", "numpy.core"):
            try:
                return importlib.import_module(f"{base}.{tail}")
            except ImportError:
                continue
    return importlib.import_module(module)


def lookup(module: str, name: str) -> Entry | None:
    """The entry for ``module.name``, its object imported; None when it is not on the list.
    ImportError or AttributeError when its library is not installed here, or too old."""
    role = TABLE.get(module, {}).get(name)
    if role is None:
        return None
    return Entry(getattr(_import(module), name), f"{module}.{name}", role)


def allowed_names() -> frozenset[str]:
    """Every ``module.name`` a result may hold."""
    return frozenset(f"{m}.{n}" for m, names in TABLE.items() for n in names)
