"""Accumulators and output files: how packets' results merge, and how a job's result is
written.

A fileset's datasets run as several jobs that write one output: :func:`finish_output` merges
their results once the last has ended, post-processes and writes it, or, if one failed, writes
nothing and says why in each job's report (the engine only schedules; see
:mod:`datasched.runtime.engine`).

Merging follows coffea's ``accumulate`` (coffea.processor): anything that adds (hist
histograms, numbers, arrays, lists, coffea's own accumulators) is added with ``+``; sets are
unioned; mappings merge key by key and keep their type (a ``defaultdict_accumulator`` stays
one, with its default). So a job's result does not depend on how its events were split into
packets or over which workers, and equals what coffea's Runner returns for the same events.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence, Set
from pathlib import Path
from typing import Any

from datasched._files import atomic_path, atomic_write_bytes
from datasched.runtime.reports import JobReport

__all__ = [
    "OUTPUT_SUFFIXES",
    "OutputPart",
    "finish_output",
    "merge",
    "merge_all",
    "read_output",
    "write_output",
]

OutputPart = tuple[JobReport, Any]
"""One job of an output's group: its report (status ``completed`` or ``failed``) and its
merged result (None when it has none)."""

OUTPUT_SUFFIXES = (".pkl", ".pickle", ".root", ".coffea")
"""What :func:`write_output` can write: a pickle of the result, its histograms as ROOT, or a
coffea file (``coffea.util.save``; read it back with ``coffea.util.load``)."""


def merge(a: Any, b: Any) -> Any:
    """The merge of two accumulators; neither is modified.

    ``None`` is the identity. Then, in coffea's order: two values that add are added (``+``:
    histograms, numbers, arrays, lists and strings concatenate); sets are unioned; mappings
    merge key by key, recursively, into a copy of the mapping's type (keys on one side only
    are kept, shared, not copied). Raises :class:`TypeError` naming the types (and the key,
    inside mappings) for what cannot be merged."""
    return _merge(a, b, ())


def _adds(x: Any) -> bool:
    return callable(getattr(type(x), "__add__", None))


def _merge(a: Any, b: Any, keys: tuple[str, ...]) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    where = f" at key {'/'.join(keys)}" if keys else ""
    if _adds(a) and _adds(b):
        try:
            return a + b
        except TypeError as exc:
            raise TypeError(
                f"cannot merge {type(a).__name__} with {type(b).__name__}{where}: {exc}"
            ) from exc
    if isinstance(a, Set) and isinstance(b, Set):
        return a | b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return _merge_mappings(a, b, keys)
    raise TypeError(f"cannot merge {type(a).__name__} with {type(b).__name__}{where}")


def _merge_mappings(a: Mapping[Any, Any], b: Mapping[Any, Any], keys: tuple[str, ...]) -> Any:
    # A shallow copy of the more general of the two types, emptied: its class, and a
    # defaultdict's default, are kept (coffea does the same; their __init__ is unknown).
    if isinstance(b, type(a)):
        like: Mapping[Any, Any] = a
    elif isinstance(a, type(b)):
        like = b
    else:
        where = f" at key {'/'.join(keys)}" if keys else ""
        raise TypeError(
            f"cannot merge {type(a).__name__} with {type(b).__name__}{where}: "
            "mappings of unrelated types"
        )
    out: MutableMapping[Any, Any]
    if isinstance(like, MutableMapping):
        out = copy.copy(like)
        out.clear()
    else:
        out = {}
    for key, value in a.items():
        out[key] = _merge(value, b[key], (*keys, repr(key))) if key in b else value
    for key, value in b.items():
        if key not in a:
            out[key] = value
    return out


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


def coffea_available() -> bool:
    """Whether coffea can be imported (the ``coffea`` extra)."""
    try:
        import coffea.util  # noqa: F401
    except ImportError:
        return False
    return True


def write_output(result: Any, path: Path) -> None:
    """Write a job's result to ``path`` atomically (:func:`datasched._files.atomic_path`:
    nothing half-written is left on error).

    ``.pkl``/``.pickle``: the whole result pickled. ``.root``: every hist.Hist in it (itself,
    or in a mapping, named by its key) written with uproot; other values are skipped, and a
    result without histograms is an error rather than an empty file. ``.coffea``: the whole
    result with ``coffea.util.save`` (lz4-compressed cloudpickle), which ``coffea.util.load``
    reads."""
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
    elif path.suffix == ".coffea":
        import coffea.util

        with atomic_path(path) as tmp:
            coffea.util.save(result, str(tmp))
    else:
        atomic_write_bytes(
            path,
            lambda fh: pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL),
            fsync=True,
        )


def read_output(path: Path, *, trust: bool = False) -> Any:
    """A result written by :func:`write_output` as a pickle or a coffea file (lz4-compressed),
    loaded with :mod:`datasched.safepickle`: a result holding classes off its list (a user's
    own) is refused unless ``trust`` (plain pickle, running their code: for one's own
    results, such as those ``datasched run`` writes)."""
    from datasched import safepickle

    if path.suffix == ".coffea":
        import fsspec  # coffea's own dependency, as is lz4

        with fsspec.open(str(path), "rb", compression="lz4") as fh:
            return safepickle.load(fh, trust=trust)
    return safepickle.load(path, trust=trust)


def finish_output(
    output: Path,
    group: Sequence[OutputPart],
    postprocess: Callable[[Any], Any] | None,
    traceback_of: Callable[[BaseException], str],
) -> tuple[bool, Any]:
    """Write the output of a group of jobs that have all ended: ``(True, result)`` when it
    was written, ``(False, None)`` when not (each report then says why).

    The group's results merge in order (coffea's accumulate: types kept); ``postprocess``
    runs once on the merge (coffea's rule: returning None changes nothing). If a job failed,
    or ``postprocess`` raised, or the output cannot be written, nothing is written and a
    stale output of an earlier run is removed, so that no file is taken for this run's
    result. ``traceback_of`` gives the user's traceback of what their postprocess raised.
    """
    failed = [r for r, _ in group if r.status == "failed"]
    if not failed:
        acc: Any = None
        for _, result in group:
            acc = merge(acc, result)
        what = "postprocess"
        try:
            if postprocess is not None:
                done = postprocess(acc)
                acc = acc if done is None else done
            what = f"output {output}"
            write_output(acc, output)
            return True, acc
        except Exception as exc:  # the user's postprocess, or an unwritable output
            for report, _ in group:
                report.status = "failed"
                report.error = f"{what}: {type(exc).__name__}: {exc}"
                report.traceback = traceback_of(exc) if what == "postprocess" else ""
    if output.exists():
        output.unlink(missing_ok=True)
        note = f" (the stale {output.name} of an earlier run was removed)"
    else:
        note = ""
    for report, _ in group:
        report.output = ""
        if report.status == "failed":
            report.error += note
        else:
            names = ", ".join(r.id for r in failed) or "another job"
            report.error = f"output not written: {names} failed"
    return False, None
