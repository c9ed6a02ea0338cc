"""The analysis API, coffea-style: ``process(events) -> accumulator``, accumulators that merge.

A job names its processor as ``module:attr``, ``path/to/file.py:attr`` or ``path/to/file.py``
(whose ``processor`` it uses); a class is instantiated with no arguments, a plain function is
wrapped. A subjob's packets each give an accumulator; :func:`merge` combines them (hist
histograms and numbers by ``+``, mappings key by key, lists concatenated), so a job's result
does not depend on how its events were split into packets or over which workers.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from datasched._files import atomic_path, atomic_write_bytes

if TYPE_CHECKING:
    import awkward as ak

__all__ = [
    "OUTPUT_SUFFIXES",
    "Processor",
    "ProcessorError",
    "load_processor",
    "merge",
    "merge_all",
    "write_output",
]

OUTPUT_SUFFIXES = (".pkl", ".pickle", ".root")
"""What :func:`write_output` can write: a pickle of the result, or its histograms as ROOT."""


class ProcessorError(ValueError):
    """A processor cannot be loaded; the message names it and the reason."""


@runtime_checkable
class Processor(Protocol):
    """What a job runs on each packet of events. It must pickle and keep no state between
    packets. It may also define ``postprocess(accumulator) -> result``, called once on the
    merged result of the whole job (found with ``getattr``, so it is optional)."""

    def process(self, events: ak.Array) -> Any: ...


class _FunctionProcessor:
    """A plain function ``f(events) -> accumulator`` used as a processor."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process(self, events: ak.Array) -> Any:
        return self.fn(events)

    def __repr__(self) -> str:
        return f"_FunctionProcessor({getattr(self.fn, '__qualname__', self.fn)!r})"


def _split_ref(ref: str) -> tuple[str, str]:
    """``(module or file, attribute)``; the attribute is ``""`` when not given."""
    target, sep, attr = ref.rpartition(":")
    if not sep:
        return ref, ""
    return target, attr


def _load_file(ref: str, target: str, base_dir: Path) -> ModuleType:
    path = Path(target)
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise ProcessorError(f"processor {ref!r}: no such file {path}")
    resolved = path.resolve()
    # One module per file (a stable name, so loading it twice reuses it); not the file's stem,
    # which could shadow an installed module.
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    name = f"datasched_user_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ProcessorError(f"processor {ref!r}: cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise ProcessorError(f"processor {ref!r}: {path} raised {exc!r}") from exc
    return module


def _import(ref: str, target: str) -> ModuleType:
    try:
        return importlib.import_module(target)
    except Exception as exc:
        raise ProcessorError(f"processor {ref!r}: cannot import {target}: {exc!r}") from exc


def load_processor(ref: str, base_dir: Path) -> Processor:
    """The processor named by ``ref``; relative file paths are found under ``base_dir`` (a
    jobs file's directory). The attribute may be dotted (``module:Outer.processor``)."""
    if not isinstance(ref, str) or not ref.strip():
        raise ProcessorError(f"processor {ref!r}: expected module:attr or a .py file")
    target, attr = _split_ref(ref.strip())
    if target.endswith(".py"):
        module = _load_file(ref, target, base_dir)
        attr = attr or "processor"
    else:
        if not target or not attr:
            raise ProcessorError(f"processor {ref!r}: expected module:attr or a .py file")
        module = _import(ref, target)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ProcessorError(f"processor {ref!r}: {attr!r} not found in {target}")
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise ProcessorError(f"processor {ref!r}: {attr}() raised {exc!r}") from exc
    if callable(getattr(obj, "process", None)):
        return obj  # type: ignore[no-any-return]
    if callable(obj):
        return _FunctionProcessor(obj)
    raise ProcessorError(
        f"processor {ref!r}: {attr!r} is a {type(obj).__name__}, "
        "not a class, a function or an object with process(events)"
    )


def merge(a: Any, b: Any) -> Any:
    """The merge of two accumulators; neither is modified.

    ``None`` is the identity; mappings merge key by key (recursively; keys on one side only
    are kept); lists are concatenated; sets unioned; anything else (hist histograms,
    numbers, arrays) is added with ``+``. Raises :class:`TypeError` naming the types (and the
    key, inside mappings) for what cannot be merged."""
    return _merge(a, b, ())


def _merge(a: Any, b: Any, keys: tuple[str, ...]) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    a_map, b_map = isinstance(a, Mapping), isinstance(b, Mapping)
    if a_map and b_map:
        out = dict(a)
        for key, value in b.items():
            out[key] = _merge(out.get(key), value, (*keys, repr(key)))
        return out
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, set | frozenset) and isinstance(b, set | frozenset):
        return a | b
    where = f" at key {'/'.join(keys)}" if keys else ""
    if a_map or b_map or not hasattr(a, "__add__"):
        raise TypeError(f"cannot merge {type(a).__name__} with {type(b).__name__}{where}")
    try:
        return a + b
    except TypeError as exc:
        raise TypeError(
            f"cannot merge {type(a).__name__} with {type(b).__name__}{where}: {exc}"
        ) from exc


def merge_all(items: Iterable[Any]) -> Any:
    """The merge of every accumulator of ``items``, in order (``None`` for none)."""
    out = None
    for item in items:
        out = merge(out, item)
    return out


def _histograms(result: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(name, histogram)`` for each hist.Hist in ``result``: itself (``result``) or the
    values of a mapping, nested mappings as ROOT directories (``a/b``)."""
    import hist

    if isinstance(result, hist.Hist):
        yield prefix or "result", result
    elif isinstance(result, Mapping):
        for key, value in result.items():
            name = f"{prefix}/{key}" if prefix else str(key)
            if isinstance(value, hist.Hist | Mapping):
                yield from _histograms(value, name)


def write_output(result: Any, path: Path) -> None:
    """Write a job's result to ``path`` atomically (a temporary file in the same directory,
    then :func:`os.replace`; nothing half-written is left on error).

    ``.pkl``/``.pickle``: the whole result pickled. ``.root``: every hist.Hist in it (itself,
    or in a mapping, named by its key) written with uproot; other values are skipped, and a
    result without histograms is an error rather than an empty file."""
    if path.suffix not in OUTPUT_SUFFIXES:
        raise ValueError(f"{path}: expected a {', '.join(OUTPUT_SUFFIXES)} file")
    if path.suffix == ".root":
        hists = list(_histograms(result))
        if not hists:
            raise ValueError(f"{path}: the result holds no histogram to write as ROOT")
    if path.suffix == ".root":
        import uproot

        with atomic_path(path) as tmp, uproot.recreate(tmp) as f:
            for name, h in hists:
                f[name] = h
    else:
        atomic_write_bytes(
            path,
            lambda fh: pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL),
            fsync=True,
        )
