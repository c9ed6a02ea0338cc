"""The analysis API, coffea-style: ``process(events) -> accumulator``, loaded once in the master
and shipped to the workers by value.

A job names its processor as ``module:attr``, ``path/to/file.py:attr`` or ``path/to/file.py``
(whose ``processor`` it uses); a class is instantiated with the job's ``processor_args``
(none by default), a plain function is wrapped. A coffea ``ProcessorABC`` is such a class.

The master loads the processor (:func:`load_processor`), checks it, and pickles it with
cloudpickle (:func:`ship`): a processor from a ``.py`` file travels by value, code included,
so no worker needs the file or a shared filesystem; one from an installed module travels by
reference (the workers import it, as coffea's executors do). Each shipped processor is keyed
by a hash of its bytes: a worker unpickles it once (:func:`unship`), and an edited file is a
new key on the next run, even on a cluster that ran the old one.

Loading a file is thread-safe: a module is executed whole before anyone can see it, under one
lock, and is named after the file's path and content, so two loads of one file share it and an
edited file is a new module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import linecache
import pickle
import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import cloudpickle

if TYPE_CHECKING:
    import awkward as ak

__all__ = [
    "Processor",
    "ProcessorError",
    "ShippedProcessor",
    "load_processor",
    "load_processor_source",
    "ship",
    "unship",
    "user_traceback",
]


class ProcessorError(ValueError):
    """A processor cannot be loaded; the message names it and the reason. ``traceback`` is
    the user's own traceback (their file and line) when their code raised, else ``""``."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


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


# -- the user's traceback ---------------------------------------------------------------------

_OWN_DIR = str(Path(__file__).resolve().parent.parent)
"""datasched's package directory: its frames are left out of the user's tracebacks."""


def _is_own(filename: str) -> bool:
    return filename.startswith((_OWN_DIR, "<frozen importlib"))


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it, without datasched's own frames (and
    importlib's) at its top: it starts at the user's code, their file and line."""
    te = traceback.TracebackException.from_exception(exc)
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if not _is_own(f.filename)), len(frames))
    te.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(te.format()).rstrip("\n")


# -- loading ----------------------------------------------------------------------------------

_LOCK = threading.RLock()
_MODULES: dict[str, ModuleType] = {}
"""Modules loaded from files, by name (a hash of path and content)."""
_SOURCES: dict[str, tuple[str, str]] = {}
"""The same modules' paths and source text, by name: shipped with their processors."""


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
    try:
        source = resolved.read_bytes()
    except OSError as exc:
        raise ProcessorError(f"processor {ref!r}: cannot read {path}: {exc.strerror}") from exc
    return _module_from_source(ref, str(resolved), source)


def _module_from_source(ref: str, filename: str, source: bytes) -> ModuleType:
    """The module of a processor file's ``source``, executed once (``filename`` is where it
    came from: its name in tracebacks and in the module's name)."""
    # Not the file's stem, which could shadow an installed module; path and content, so that
    # an edited file is a new module and two files of one name are two modules.
    digest = hashlib.sha256(filename.encode() + b"\0" + source).hexdigest()[:16]
    name = f"datasched_user_{digest}"
    with _LOCK:
        module = _MODULES.get(name)
        if module is not None:
            return module
        text = source.decode("utf-8", "replace")
        module = ModuleType(name)
        module.__file__ = filename
        # In sys.modules while it runs (dataclasses and pickle look there), but other threads
        # find modules in _MODULES only, under the lock, once they are complete.
        sys.modules[name] = module
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
        except BaseException as exc:
            del sys.modules[name]
            if not isinstance(exc, Exception):
                raise
            raise ProcessorError(
                f"processor {ref!r}: {filename} raised {type(exc).__name__}: {exc}",
                user_traceback(exc),
            ) from exc
        # Its classes and functions travel by value: the workers need no copy of the file.
        cloudpickle.register_pickle_by_value(module)
        _SOURCES[name] = (filename, text)
        _MODULES[name] = module
        return module


def _import(ref: str, target: str) -> ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            # The module named (or a package above it) is not there: one line, no traceback
            # of the import machinery. A module the user's code imports that is missing is
            # an error in their code: its traceback follows, below.
            raise ProcessorError(
                f"processor {ref!r}: no module named {exc.name!r} (not installed, or not on "
                "the path: a file of your own is given as path/to/file.py:attr)"
            ) from exc
        raise ProcessorError(
            f"processor {ref!r}: cannot import {target}: {exc!r}", user_traceback(exc)
        ) from exc
    except Exception as exc:
        raise ProcessorError(
            f"processor {ref!r}: cannot import {target}: {exc!r}", user_traceback(exc)
        ) from exc


def load_processor(ref: str, base_dir: Path, args: Mapping[str, Any] | None = None) -> Processor:
    """The processor named by ``ref``; relative file paths are found under ``base_dir`` (a
    jobs file's directory). The attribute may be dotted (``module:Outer.processor``). A
    class is instantiated with ``args`` as keyword arguments (its constructor arguments)."""
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
    return _processor_in(ref, module, target, attr, args)


def load_processor_source(
    ref: str, filename: str, source: bytes, args: Mapping[str, Any] | None = None
) -> Processor:
    """The processor named by ``ref`` (``file.py:attr``) from the file's ``source`` as
    bytes (its path ``filename``, for tracebacks): what a sandboxed child does with the file
    a job names, which it has no view of."""
    _, attr = _split_ref(ref.strip())
    module = _module_from_source(ref, filename, source)
    return _processor_in(ref, module, filename, attr or "processor", args)


def _processor_in(
    ref: str, module: ModuleType, target: str, attr: str, args: Mapping[str, Any] | None
) -> Processor:
    """``attr`` of ``module``: a class instantiated with ``args``, a function wrapped, or an
    object with ``process``."""
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ProcessorError(f"processor {ref!r}: {attr!r} not found in {target}")
    if isinstance(obj, type):
        try:
            obj = obj(**(args or {}))
        except Exception as exc:
            raise ProcessorError(
                f"processor {ref!r}: {attr}(**processor_args) raised {type(exc).__name__}: {exc}"
                if args
                else f"processor {ref!r}: {attr}() raised {type(exc).__name__}: {exc}",
                user_traceback(exc),
            ) from exc
    elif args:
        raise ProcessorError(
            f"processor {ref!r}: processor_args given, but {attr!r} is not a class"
        )
    if callable(getattr(obj, "process", None)):
        return obj  # type: ignore[no-any-return]
    if callable(obj):
        return _FunctionProcessor(obj)
    raise ProcessorError(
        f"processor {ref!r}: {attr!r} is a {type(obj).__name__}, "
        "not a class, a function or an object with process(events)"
    )


# -- shipping ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShippedProcessor:
    """A processor as it travels to the workers: its cloudpickle bytes, keyed by their hash."""

    name: str
    """The job's reference to it (for messages)."""
    key: str
    blob: bytes = b""
    sources: tuple[tuple[str, str, str], ...] = ()
    """``(module, path, source text)`` of the processor files it was loaded from: a worker
    shows the user's file and lines in tracebacks without a copy of the file."""

    def __repr__(self) -> str:
        return f"ShippedProcessor({self.name!r}, key={self.key!r}, {len(self.blob)} bytes)"


def ship(processor: Processor, name: str) -> ShippedProcessor:
    """``processor`` pickled for the workers (checked: it must pickle and unpickle here)."""
    try:
        blob = cloudpickle.dumps(processor, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)
    except Exception as exc:
        raise ProcessorError(
            f"processor {name!r}: cannot be sent to the workers (it must pickle): "
            f"{type(exc).__name__}: {exc}",
            user_traceback(exc),
        ) from exc
    with _LOCK:
        sources = tuple(
            (m, path, text) for m, (path, text) in _SOURCES.items() if m.encode() in blob
        )
    return ShippedProcessor(name, hashlib.sha256(blob).hexdigest()[:24], blob, sources)


_UNSHIPPED: OrderedDict[str, Processor] = OrderedDict()
_UNSHIPPED_MAX = 32
"""Processors a worker keeps unpickled (runs of different jobs and versions)."""


def unship(shipped: ShippedProcessor) -> Processor:
    """The processor of ``shipped``, unpickled once per process and key (thread-safe)."""
    with _LOCK:
        known = _UNSHIPPED.get(shipped.key)
        if known is not None:
            _UNSHIPPED.move_to_end(shipped.key)
            return known
        proc: Processor = pickle.loads(shipped.blob)
        if shipped.sources:
            _restore_filenames(proc, shipped.sources)
        _UNSHIPPED[shipped.key] = proc
        while len(_UNSHIPPED) > _UNSHIPPED_MAX:
            _UNSHIPPED.popitem(last=False)
        return proc


_DYNAMIC = "<dynamic-code>"
"""The file name cloudpickle (3.1.3 on) gives code it pickles by value."""


def _restore_filenames(proc: Any, sources: tuple[tuple[str, str, str], ...]) -> None:
    """Give the unpickled code of the user's processor files its file names back, and their
    lines to :mod:`linecache`, so that a traceback on a worker names the user's file and
    line as it would on the master."""
    paths = {module: path for module, path, _ in sources}
    for _, path, text in sources:
        linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    seen: set[int] = set()
    todo: list[Any] = [proc, type(proc)]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            if obj.__module__ in paths:
                todo.extend(vars(obj).values())
                todo.extend(obj.__mro__[1:])
        elif isinstance(obj, staticmethod | classmethod):
            todo.append(obj.__func__)
        elif isinstance(obj, property):
            todo.extend(f for f in (obj.fget, obj.fset, obj.fdel) if f is not None)
        elif isinstance(obj, FunctionType):
            where = paths.get(obj.__module__)
            if where is not None:
                obj.__code__ = _with_filename(obj.__code__, where)
                todo.extend(obj.__globals__.values())
        elif callable(getattr(obj, "process", None)) or isinstance(obj, _FunctionProcessor):
            todo.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())


def _with_filename(code: CodeType, path: str) -> CodeType:
    """``code`` and the code nested in it, named as in ``path`` where cloudpickle left
    its placeholder."""
    consts = tuple(
        _with_filename(c, path) if isinstance(c, CodeType) else c for c in code.co_consts
    )
    if code.co_filename == _DYNAMIC:
        return code.replace(co_filename=path, co_consts=consts)
    return code.replace(co_consts=consts) if consts != code.co_consts else code
