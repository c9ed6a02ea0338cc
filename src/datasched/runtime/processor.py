"""The analysis API, coffea-style: ``process(events) -> accumulator``, accumulators that merge.

A processor is named ``module:attr``, ``path/to/file.py:attr`` or ``path/to/file.py`` (whose
``processor`` it uses); a class is instantiated, a plain function wrapped. Results merge with
``+`` (hist histograms, numbers), key by key for mappings, lists concatenated.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Processor",
    "ProcessorError",
    "load_processor",
    "merge",
    "merge_all",
    "write_output",
]


class ProcessorError(ValueError):
    """A processor cannot be loaded; the message names it and the reason."""


@runtime_checkable
class Processor(Protocol):
    """What a job runs on each packet of events."""

    def process(self, events: Any) -> Any: ...


class _FunctionProcessor:
    """A plain function used as a processor."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process(self, events: Any) -> Any:
        return self.fn(events)


def _load_module(ref: str, base_dir: Path) -> tuple[Any, str]:
    target, sep, attr = ref.rpartition(":") if ":" in ref else (ref, "", "")
    if not sep:
        target, attr = ref, ""
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise ProcessorError(f"processor {ref!r}: no such file {path}")
        name = f"datasched_user_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ProcessorError(f"processor {ref!r}: cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ProcessorError(f"processor {ref!r}: {path} raised {exc!r}") from exc
        return module, attr or "processor"
    if not attr:
        raise ProcessorError(f"processor {ref!r}: expected module:attr or a .py file")
    try:
        return importlib.import_module(target), attr
    except ImportError as exc:
        raise ProcessorError(f"processor {ref!r}: cannot import {target}: {exc}") from exc


def load_processor(ref: str, base_dir: Path) -> Processor:
    """The processor named by ``ref`` (relative paths against ``base_dir``)."""
    module, attr = _load_module(ref, base_dir)
    obj = getattr(module, attr, None)
    if obj is None:
        raise ProcessorError(f"processor {ref!r}: {attr!r} not found")
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise ProcessorError(f"processor {ref!r}: {attr}() raised {exc!r}") from exc
    if callable(getattr(obj, "process", None)):
        return obj  # type: ignore[no-any-return]
    if callable(obj):
        return _FunctionProcessor(obj)
    raise ProcessorError(f"processor {ref!r}: {attr!r} has no process(events) method")


def merge(a: Any, b: Any) -> Any:
    """Merge two accumulators (None is the identity)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = dict(a)
        for key, value in b.items():
            out[key] = merge(out.get(key), value)
        return out
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    try:
        return a + b
    except TypeError as exc:
        raise TypeError(
            f"cannot merge {type(a).__name__} with {type(b).__name__}: no + between them"
        ) from exc


def merge_all(items: Iterable[Any]) -> Any:
    out = None
    for item in items:
        out = merge(out, item)
    return out


def write_output(result: Any, path: Path) -> None:
    """Write a job's result atomically: pickle (``.pkl``), or its histograms as a ROOT file
    (``.root``, with uproot); nothing half-written is left on error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        if path.suffix == ".root":
            import hist
            import uproot

            hists = {}
            if isinstance(result, hist.Hist):
                hists["result"] = result
            elif isinstance(result, Mapping):
                hists = {str(k): v for k, v in result.items() if isinstance(v, hist.Hist)}
            with uproot.recreate(tmp) as f:
                for name, h in hists.items():
                    f[name] = h
        else:
            with open(tmp, "wb") as fh:
                pickle.dump(result, fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
