"""Loading results (pickles made by users' code) without running any code they name.

A packet's or a request's result is a pickle its user's processor made on a worker. Plain
``pickle.loads`` runs whatever it names (``os.system``, a class's ``__reduce__`` or
``__setstate__``), so whoever loads another user's result (an administrator, the service's
tools) would run that user's code. :func:`loads` and :func:`load` load only what analyses
return (:mod:`datasched.safepickle.allowed`: containers, numbers, numpy, awkward, hist and
boost-histogram, coffea's accumulators) and refuse anything else with :class:`Refused`, one
line naming it. ``trust=True`` is plain pickle: for one's own results only
(``datasched run`` writes the user's own; ``datasched result --trust``).

What the loader decides about pickle's protocol (docs/service.md, "Results and user code"):

* Names are looked up exactly, never imported by prefix nor followed as dotted paths
  (protocol 4's ``a.b`` names); numpy's helpers load under ``numpy.core`` (numpy 1) and
  ``numpy._core`` (numpy 2). Python 2 names (``__builtin__``) are mapped as pickle maps them.
* Calls (``REDUCE``, ``INST``, ``OBJ``) and ``NEWOBJ`` go only to listed classes and
  functions; functions get their arguments checked (:mod:`datasched.safepickle.states`).
  ``copyreg._reconstructor`` (protocols 0 and 1) makes only listed pure-Python classes over
  ``object`` or a builtin base; ``copyreg.__newobj__`` is not listed (``NEWOBJ`` does that).
* State (``BUILD``: ``__setstate__`` or the instance's ``__dict__``) goes only to instances
  of listed classes, never to a class, function or module (that would change it for the
  whole process). A numpy dtype is rebuilt from its state by numpy's constructor, and a
  boost-histogram C++ object is checked once its state is in, before anything uses it:
  until then the pickle holds an inert placeholder.
* Persistent ids and extension codes (``copyreg``'s registry) are refused: analysis
  libraries use neither, and a registry entry cached by an earlier load would skip the
  check. Out-of-band buffers are refused by pickle itself (none are given).

It is the pure-Python unpickler with these checks (slower than the C one: seconds for
millions of small objects, nothing for histograms and arrays, which are a few large
strings of bytes). The listed libraries' own code still runs on the pickle's data; the
checks cover the places where that code is known to trust it with memory.
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import sys
import types
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from datasched.safepickle.allowed import CLASS, FUNCTION, VALUE, Entry, allowed_names, lookup
from datasched.safepickle.states import (
    StateError,
    check_built,
    check_call,
    check_result,
    dtype_from_state,
)

__all__ = ["Refused", "allowed_names", "load", "loads"]

TRUST_HINT = (
    "to load it anyway, running its code, pass trust=True (datasched result --trust): "
    "only for results you made yourself"
)


class Refused(pickle.UnpicklingError, ValueError):
    """A pickle naming, or doing, what a result may not; ``name`` is the ``module.name`` at
    fault (None when it is no one name)."""

    def __init__(self, reason: str, name: str | None = None) -> None:
        super().__init__(f"{reason}; {TRUST_HINT}")
        self.reason = reason
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.name))


def loads(data: bytes | bytearray | memoryview, *, trust: bool = False) -> Any:
    """The object pickled in ``data``, if it holds only what results may hold (else
    :class:`Refused`, running nothing); ``trust=True``: plain ``pickle.loads``."""
    if trust:
        return pickle.loads(data)
    return _Restricted(io.BytesIO(data)).load()


def load(file: str | os.PathLike[str] | IO[bytes], *, trust: bool = False) -> Any:
    """:func:`loads` of a file, given by path or open in binary mode."""
    if isinstance(file, str | os.PathLike):
        with Path(file).open("rb") as fh:
            return loads(fh.read(), trust=trust)
    return loads(file.read(), trust=trust)


_UNSET: Any = object()


class _Pending:
    """What ``NEWOBJ``/``REDUCE`` of a numpy dtype or a boost-histogram C++ class leaves on
    the stack until ``BUILD`` gives it its state: an inert object, made real and checked
    then (:meth:`_Restricted._settle`)."""

    __slots__ = ("args", "built", "entry", "kwargs")

    def __init__(self, entry: Entry, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.entry, self.args, self.kwargs = entry, args, kwargs
        self.built: Any = _UNSET

    def __repr__(self) -> str:
        return f"<{self.entry.name} awaiting its state>"


def _what(obj: Any) -> str:
    if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__} object"


_NOT_DATA = (type, _Pending, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
"""What a pickle may not change: classes, functions, modules (changed for the whole process),
and placeholders."""


def _is_pybind(cls: Any) -> bool:
    return isinstance(cls, type) and type(cls).__name__ == "pybind11_type"


def _numpy() -> Any:
    return sys.modules.get("numpy")


_P = pickle
_RECONSTRUCTOR: Any = vars(copyreg)["_reconstructor"]
_Base: Any = pickle._Unpickler  # the pure-Python unpickler: its opcodes can be checked


class _Restricted(_Base):  # type: ignore[misc]
    """pickle's pure-Python unpickler, with the checks of the module's docstring."""

    if TYPE_CHECKING:
        stack: list[Any]
        metastack: list[list[Any]]
        proto: int
        fix_imports: bool

    dispatch: ClassVar[dict[int, Any]] = dict(_Base.dispatch)

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._found: dict[int, Entry] = {}
        self._pending: list[_Pending] = []

    def load(self) -> Any:
        obj = self._settled(super().load())
        for p in self._pending:
            if p.built is _UNSET:
                raise Refused(f"the pickle makes {p.entry.name} without its state", p.entry.name)
        return obj

    # -- names ----------------------------------------------------------------------------

    def find_class(self, module: str, name: str) -> Any:
        sys.audit("pickle.find_class", module, name)
        if self.proto < 3 and self.fix_imports:
            import _compat_pickle

            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        try:
            entry = lookup(module, name)
        except (ImportError, AttributeError) as exc:
            raise Refused(
                f"the result holds {module}.{name}, which cannot be loaded here: {exc}",
                f"{module}.{name}",
            ) from None
        if entry is None:
            raise Refused(
                f"the result holds {module}.{name}, which is not among the classes and "
                "functions a result may hold",
                f"{module}.{name}",
            )
        self._found[id(entry.obj)] = entry
        return entry.obj

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("the pickle refers to a persistent id, which results never hold")

    def get_extension(self, code: int) -> None:
        raise Refused(f"the pickle uses extension code {code}, which results never use")

    def _entry(self, obj: Any) -> Entry | None:
        entry = self._found.get(id(obj))
        return entry if entry is not None and entry.obj is obj else None

    def _array_class(self, obj: Any) -> bool:
        np = _numpy()
        entry = self._entry(obj)
        return (
            entry is not None
            and np is not None
            and isinstance(obj, type)
            and issubclass(obj, np.ndarray)
        )

    # -- calls ----------------------------------------------------------------------------

    def _call(self, func: Any, args: Any) -> Any:
        if type(args) is not tuple:
            raise Refused(f"the pickle calls {_what(func)} with arguments that are not a tuple")
        entry = self._entry(func)
        if entry is None:
            raise Refused(f"the pickle calls {_what(func)}, which is not a listed function")
        if entry.role == VALUE:
            raise Refused(f"the pickle calls {entry.name}, which a result may hold, not call")
        if entry.role == CLASS:
            np = _numpy()
            if np is not None and func is np.dtype:
                return self._pend(entry, args, {})
            return func(*args)
        assert entry.role == FUNCTION
        if func is _RECONSTRUCTOR:
            return self._reconstructor(args)
        if entry.name.endswith("._reconstruct") and not (args and self._array_class(args[0])):
            raise Refused(f"{entry.name}: the first argument is not a listed array class")
        try:
            check_call(entry.name, args)
            result = func(*args)
            check_result(entry.name, result)
        except StateError as exc:
            raise Refused(str(exc), entry.name) from None
        return result

    def _new(self, cls: Any, args: Any, kwargs: Any) -> Any:
        entry = self._entry(cls)
        if entry is None or entry.role != CLASS or not isinstance(cls, type):
            raise Refused(f"the pickle creates {_what(cls)}, which is not a listed class")
        if type(args) is not tuple or type(kwargs) is not dict:
            raise Refused(f"the pickle creates {entry.name} with malformed arguments")
        np = _numpy()
        if _is_pybind(cls) or (np is not None and cls is np.dtype):
            return self._pend(entry, args, kwargs)
        return cls.__new__(cls, *args, **kwargs)

    def _pend(self, entry: Entry, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Pending:
        p = _Pending(entry, args, kwargs)
        self._pending.append(p)
        return p

    def _reconstructor(self, args: tuple[Any, ...]) -> Any:
        # Protocols 0 and 1 make a plain class's instance as _reconstructor(cls, base, state).
        cls, base = (args[0], args[1]) if len(args) == 3 else (None, None)
        entry, base_entry = self._entry(cls), self._entry(base)
        builtin_base = base_entry is not None and base_entry.name.startswith("builtins.")
        ok = (
            entry is not None
            and entry.role == CLASS
            and isinstance(cls, type)
            and not _is_pybind(cls)
            and cls.__module__ != "numpy"
            and (base is object or builtin_base)
            and isinstance(base, type)
            and issubclass(cls, base)
        )
        if not ok:
            raise Refused(f"copyreg._reconstructor: {_what(cls)} over {_what(base)} is not allowed")
        return _RECONSTRUCTOR(*args)

    def _settle(self, p: _Pending, state: Any) -> Any:
        if p.built is not _UNSET:
            raise Refused(f"the pickle gives {p.entry.name} its state twice", p.entry.name)
        cls = p.entry.obj
        try:
            if not _is_pybind(cls):  # numpy.dtype
                if p.kwargs:
                    raise StateError("numpy.dtype: keyword arguments numpy never writes")
                built = dtype_from_state(p.args, state)
            else:
                built = cls.__new__(cls, *p.args, **p.kwargs)
                built.__setstate__(state)
                check_built(built, state)
        except StateError as exc:
            raise Refused(str(exc), p.entry.name) from None
        p.built = built
        return built

    def _settled(self, obj: Any) -> Any:
        if type(obj) is _Pending:
            if obj.built is _UNSET:
                raise Refused(f"the pickle uses {obj.entry.name} before its state", obj.entry.name)
            return obj.built
        return obj

    # -- opcodes --------------------------------------------------------------------------

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._call(self.stack[-1], args)

    dispatch[_P.REDUCE[0]] = load_reduce

    def load_newobj(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._new(self.stack[-1], args, {})

    dispatch[_P.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        self.stack[-1] = self._new(self.stack[-1], args, kwargs)

    dispatch[_P.NEWOBJ_EX[0]] = load_newobj_ex

    def _instantiate(self, klass: Any, args: list[Any]) -> None:
        # INST and OBJ (protocols 0 and 1): klass(*args), or klass.__new__(klass).
        if args or not isinstance(klass, type) or hasattr(klass, "__getinitargs__"):
            self.stack.append(self._call(klass, tuple(args)))
        else:
            self.stack.append(self._new(klass, (), {}))

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is _Pending:
            self.stack[-1] = self._settle(inst, state)
            return
        cls = type(inst)
        entry = self._entry(cls)
        np = _numpy()
        plain = (
            entry is not None
            and entry.role == CLASS
            and not _is_pybind(cls)
            and not (np is not None and cls is np.dtype)
        )
        if not (plain or self._array_class(cls)):
            raise Refused(f"the pickle gives state to {_what(inst)}, which may not take one")
        self.stack.append(state)
        _Base.dispatch[_P.BUILD[0]](self)

    dispatch[_P.BUILD[0]] = load_build

    def _check_target(self, target: Any, op: str) -> None:
        if isinstance(
            target,
            type | _Pending | types.ModuleType | types.FunctionType | types.BuiltinFunctionType,
        ):
            raise Refused(f"the pickle {op} {_what(target)}, which only data may take")

    def _marked_target(self) -> Any:
        return self.metastack[-1][-1] if self.metastack and self.metastack[-1] else None

    def load_append(self) -> None:
        self._check_target(self.stack[-2] if len(self.stack) > 1 else None, "appends to")
        _Base.dispatch[_P.APPEND[0]](self)

    dispatch[_P.APPEND[0]] = load_append

    def load_appends(self) -> None:
        self._check_target(self._marked_target(), "appends to")
        _Base.dispatch[_P.APPENDS[0]](self)

    dispatch[_P.APPENDS[0]] = load_appends

    def load_setitem(self) -> None:
        self._check_target(self.stack[-3] if len(self.stack) > 2 else None, "sets an item of")
        _Base.dispatch[_P.SETITEM[0]](self)

    dispatch[_P.SETITEM[0]] = load_setitem

    def load_setitems(self) -> None:
        self._check_target(self._marked_target(), "sets items of")
        _Base.dispatch[_P.SETITEMS[0]](self)

    dispatch[_P.SETITEMS[0]] = load_setitems

    def load_additems(self) -> None:
        self._check_target(self._marked_target(), "adds items to")
        _Base.dispatch[_P.ADDITEMS[0]](self)

    dispatch[_P.ADDITEMS[0]] = load_additems

    def _get(self, op: bytes) -> None:
        _Base.dispatch[op[0]](self)
        top = self.stack[-1]
        if type(top) is _Pending and top.built is not _UNSET:
            self.stack[-1] = top.built

    def load_get(self) -> None:
        self._get(_P.GET)

    def load_binget(self) -> None:
        self._get(_P.BINGET)

    def load_long_binget(self) -> None:
        self._get(_P.LONG_BINGET)

    dispatch[_P.GET[0]] = load_get
    dispatch[_P.BINGET[0]] = load_binget
    dispatch[_P.LONG_BINGET[0]] = load_long_binget
