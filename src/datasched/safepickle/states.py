"""Checks of what a pickle hands to the listed libraries, where the library itself does not.

The listed functions and classes run library code on the pickle's data, and some of it
trusts that data with memory: numpy builds a dtype from whatever state it is given (a field
past the item's end, an object field flagged as plain bytes: then an array reads outside its
buffer or takes bytes for object pointers), an ndarray called directly wraps any bytes as
object pointers, and boost-histogram restores a histogram whose storage is shorter than its
axes say (a fill then writes outside it). So:

* a numpy dtype is rebuilt from its state through numpy's public constructor
  (:func:`dtype_from_state`), which checks offsets and sizes and computes the flags itself;
* numpy's helpers get only arguments of the kinds numpy's own pickles give them, never an
  object dtype over raw bytes (:func:`check_call`);
* a boost-histogram C++ object is checked once its state is restored: every axis has a size
  of at least zero and the storage holds exactly one cell per bin (:func:`check_built`);
* an awkward array's buffers are bytes or plain arrays (no callables: awkward calls them
  later) and the array it makes passes ``ak.validity_error`` (:func:`check_result`).

Each check raises :class:`StateError` with the reason; the unpickler turns it into a refusal.
"""

from __future__ import annotations

import math
from typing import Any, cast

__all__ = ["StateError", "check_built", "check_call", "check_result", "dtype_from_state"]


class StateError(ValueError):
    """Data a listed function or class would take but should not."""


_ALIGNED_STRUCT = 0x80
"""numpy's NPY_ALIGNED_STRUCT flag: the only flag a dtype's state decides (align=True)."""


def _brief(x: Any) -> str:
    """``x`` for a message: a plain value's repr, cut short; else only its type (the repr of
    a pickle's objects is their code, run on their data, and may be huge)."""
    if x is None or isinstance(x, bool | int | float | str | bytes):
        return repr(x)[:60]
    if isinstance(x, tuple) and len(x) <= 10:
        return "(" + ", ".join(_brief(v) for v in x) + ")"
    return f"a {type(x).__module__}.{type(x).__qualname__}"


def _is_int(x: Any) -> bool:
    return type(x) is int


def _shape(x: Any, what: str) -> tuple[int, ...]:
    if not (isinstance(x, tuple) and all(_is_int(n) and n >= 0 for n in x)):
        raise StateError(f"{what}: expected a shape (whole numbers of at least 0), got {_brief(x)}")
    return x


def dtype_from_state(args: tuple[Any, ...], state: Any) -> Any:
    """The dtype that ``numpy.dtype(*args)`` given ``state`` (numpy's ``__reduce__``) stands
    for, made by numpy's constructor from the state's names, formats, offsets and sizes;
    never numpy's ``__setstate__``, which takes sizes and flags as they are given."""
    import numpy as np

    if not 1 <= len(args) <= 3:
        raise StateError(f"numpy.dtype: expected 1 to 3 arguments, got {len(args)}")
    base = np.dtype(args[0], bool(args[1]) if len(args) > 1 else False)
    if not (isinstance(state, tuple) and state and state[0] in (3, 4)):
        raise StateError(f"numpy.dtype: not a state numpy writes: {_brief(state)}")
    if len(state) != (8 if state[0] == 3 else 9):
        raise StateError(f"numpy.dtype: a version {state[0]} state of {len(state)} items")
    endian, sub, names, fields, elsize, _alignment, flags = state[1:8]
    extra = state[8] if state[0] == 4 else None
    if not (_is_int(elsize) and _is_int(flags)) or endian not in ("<", ">", "=", "|"):
        raise StateError(f"numpy.dtype: not a state numpy writes: {_brief(state)}")
    metadata, unit = extra if isinstance(extra, tuple) and len(extra) == 2 else (extra, None)
    if names is not None:
        dt = _structured(names, fields, elsize, bool(flags & _ALIGNED_STRUCT))
    elif sub is not None:
        if not (isinstance(sub, tuple) and len(sub) == 2 and isinstance(sub[0], np.dtype)):
            raise StateError(
                f"numpy.dtype: a subarray state that is not (dtype, shape): {_brief(sub)}"
            )
        dt = np.dtype((sub[0], _shape(sub[1], "numpy.dtype subarray")))
    elif base.names is not None or base.subdtype is not None:
        raise StateError("numpy.dtype: a structured dtype given a plain dtype's state")
    elif base.kind in "SUV":
        if elsize < 0 or (base.kind == "U" and elsize % 4):
            raise StateError(f"numpy.dtype: a {base.kind} item of {elsize} bytes")
        dt = np.dtype(f"{base.kind}{elsize // 4 if base.kind == 'U' else elsize}")
    elif base.kind in "mM":
        dt = np.dtype(f"{base.kind}8{_datetime_unit(unit)}")
    else:
        dt = base
    if elsize >= 0 and dt.itemsize != elsize:
        raise StateError(f"numpy.dtype: items of {dt.itemsize} bytes, the state says {elsize}")
    if endian in "<>" and dt.byteorder != "|" and dt.names is None and dt.subdtype is None:
        dt = dt.newbyteorder(endian)
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise StateError(f"numpy.dtype: metadata that is not a dict: {_brief(metadata)}")
        if metadata:
            dt = np.dtype(dt, metadata=metadata)
    return dt


def _structured(names: Any, fields: Any, elsize: int, aligned: bool) -> Any:
    import numpy as np

    if not (isinstance(names, tuple) and isinstance(fields, dict)):
        raise StateError("numpy.dtype: field names that are not a tuple, or fields not a dict")
    formats, offsets, titles = [], [], []
    for name in names:
        field = fields.get(name) if isinstance(name, str) else None
        ok = isinstance(field, tuple) and len(field) in (2, 3)
        if not (ok and isinstance(field[0], np.dtype) and _is_int(field[1])):  # type: ignore[index]
            raise StateError(f"numpy.dtype: field {_brief(name)} is not (dtype, offset[, title])")
        assert isinstance(field, tuple)
        formats.append(field[0])
        offsets.append(field[1])
        titles.append(field[2] if len(field) == 3 else None)
    spec: dict[str, Any] = {
        "names": list(names),
        "formats": formats,
        "offsets": offsets,
        "itemsize": elsize,
    }
    if any(t is not None for t in titles):
        spec["titles"] = titles
    try:
        return np.dtype(cast(Any, spec), align=aligned)
    except (TypeError, ValueError) as exc:
        raise StateError(f"numpy.dtype: fields numpy refuses: {exc}") from exc


def _datetime_unit(unit: Any) -> str:
    if unit is None:
        return ""
    if not (isinstance(unit, tuple) and len(unit) >= 2 and _is_int(unit[1])):
        raise StateError(f"numpy.dtype: a datetime unit numpy does not write: {_brief(unit)}")
    name = unit[0].decode("ascii") if isinstance(unit[0], bytes) else unit[0]
    if not (isinstance(name, str) and name.isalpha()):
        raise StateError(f"numpy.dtype: a datetime unit numpy does not write: {_brief(unit)}")
    return "" if name == "generic" else f"[{unit[1]}{name}]"


_BUFFERS = (bytes, bytearray)
_BH_FNS = (("_sqrt_fn",), ("_sq_fn",), ("_log_fn",), ("_exp_fn",))
"""What boost-histogram's own transforms (log, sqrt) convert, by name."""


def _plain_array(x: Any) -> bool:
    import numpy as np

    return isinstance(x, _BUFFERS) or (type(x) is np.ndarray and not x.dtype.hasobject)


def check_call(name: str, args: tuple[Any, ...]) -> None:
    """Refuse arguments to the listed function ``name`` (``module.name``) that its library
    would misuse; see the module's docstring."""
    import numpy as np

    short = name.rsplit(".", 1)[1]
    if name == "_codecs.encode":
        # pickle's protocols 0-2 write bytes as encode(text, "latin1").
        if not (len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1")):
            raise StateError("_codecs.encode: only encode(text, 'latin1'), as pickle writes bytes")
    elif name.startswith("numpy.") and short == "_reconstruct":
        if len(args) != 3 or not isinstance(args[2], bytes | str):
            raise StateError("numpy _reconstruct: expected (array class, shape, type code)")
        _shape(args[1], "numpy _reconstruct")
    elif name.startswith("numpy.") and short == "scalar":
        if not (1 <= len(args) <= 2 and isinstance(args[0], np.dtype)):
            raise StateError("numpy scalar: expected (dtype, bytes)")
        if args[0].hasobject:
            if args[0] != np.dtype(object):
                raise StateError("numpy scalar: a structured item holding objects, from bytes")
        elif len(args) == 2 and not isinstance(args[1], bytes):
            raise StateError("numpy scalar: a plain item from something other than bytes")
    elif name.startswith("numpy.") and short == "_frombuffer":
        ok = 4 <= len(args) <= 5 and isinstance(args[0], _BUFFERS)
        if not (ok and isinstance(args[1], np.dtype) and args[3] in ("C", "F", "A", "K")):
            raise StateError("numpy _frombuffer: expected (bytes, dtype, shape, order)")
        if args[1].hasobject:
            raise StateError("numpy _frombuffer: an array of objects made from raw bytes")
        _shape(args[2], "numpy _frombuffer")
    elif name.startswith("awkward._pickle."):
        _check_awkward(short, args)
    elif name == "boost_histogram.axis.transform._internal_conversion" and args not in _BH_FNS:
        raise StateError(f"boost-histogram transform: not one of its own: {_brief(args)}")


def _check_awkward(short: str, args: tuple[Any, ...]) -> None:
    schema_2 = short.endswith("_2")
    record = short.startswith("unpickle_record")
    n = 5 + schema_2 + record
    if len(args) != n:
        raise StateError(f"awkward {short}: expected {n} arguments, got {len(args)}")
    form, length, container = args[:3]
    rest = list(args[3:])
    if schema_2 and rest.pop(0) not in ("<", ">"):
        raise StateError(f"awkward {short}: a byte order other than < or >")
    behavior, attrs = rest[:2]
    if not (isinstance(form, dict) and _is_int(length) and length >= 0):
        raise StateError(f"awkward {short}: expected a form (dict) and a length (at least 0)")
    if not (isinstance(container, dict) and all(_plain_array(v) for v in container.values())):
        raise StateError(f"awkward {short}: buffers that are not bytes or plain arrays")
    if not all(x is None or isinstance(x, dict) for x in (behavior, attrs)):
        raise StateError(f"awkward {short}: behavior and attrs must be dicts or None")
    if record and not _is_int(rest[2]):
        raise StateError(f"awkward {short}: a record position that is not a whole number")


def check_result(name: str, result: Any) -> None:
    """Refuse what a listed function made when its library finds it inconsistent (an awkward
    array whose offsets or indexes point outside its buffers)."""
    if name.startswith("awkward._pickle."):
        import awkward as ak

        layout = result.layout.array if isinstance(result, ak.Record) else result
        problem = ak.validity_error(layout)
        if problem:
            raise StateError(f"awkward: an array awkward finds invalid: {problem}")


_STORAGE: dict[str, tuple[int, tuple[str, ...]]] = {
    "any_double": (1, ("float64",)),
    "any_int64": (1, ("int64",)),
    "any_atomic_int64": (1, ("int64",)),
    "any_weight": (2, ("float64",)),
    "any_mean": (3, ("float64",)),
    "any_weighted_mean": (4, ("float64",)),
    "any_unlimited": (1, ("uint8", "uint16", "uint32", "uint64", "float64")),
}
"""boost-histogram's histogram classes: the storage array's values per cell, and its types."""


def _check_axis(axis: Any, where: str) -> int:
    size, extent = axis.size, axis.extent
    if not (_is_int(size) and _is_int(extent) and 0 <= size <= extent <= size + 2):
        raise StateError(f"{where}: an axis of {size} bins and {extent} with flow")
    return int(extent)


def check_built(obj: Any, state: Any) -> None:
    """Refuse a boost-histogram C++ object whose restored state is inconsistent: an axis of
    fewer than 0 bins, or a histogram whose storage does not hold one cell per bin."""
    import numpy as np

    cls = type(obj)
    module = cls.__module__
    if module == "boost_histogram._core.axis":
        _check_axis(obj, f"boost-histogram {cls.__name__}")
    elif module == "boost_histogram._core.hist" and cls.__name__ in _STORAGE:
        where = f"boost-histogram {cls.__name__}"
        per_cell, dtypes = _STORAGE[cls.__name__]
        cells = math.prod(_check_axis(obj.axis(i), where) for i in range(obj.rank()))
        data = state[-1] if isinstance(state, tuple) and state else None
        if not (type(data) is np.ndarray and data.dtype.name in dtypes):
            raise StateError(f"{where}: a storage that is not an array of {'/'.join(dtypes)}")
        if obj.size() != cells or data.size != cells * per_cell:
            raise StateError(f"{where}: {data.size} stored values for {cells} cells")
