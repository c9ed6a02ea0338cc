"""A reproduction's runs, kept as they finish so that an interrupted one is not lost.

A reproduction is many independent runs (:class:`Unit`: one simulation, one maximal-load
search, one timed batch). :func:`run_units` runs them, in worker processes
or on a Dask cluster, largest first so that the last to finish are short, and writes each
result, as it arrives, to a :class:`RunStore`: one JSON file per run under ``DIR/runs/``. A
later call with the same store reads back the runs it holds instead of running them again
(``datasched reproduce ponce --resume``, and ``romosan``, ``grid`` and ``proof`` likewise). A
stored run counts only for the same study, the same options (``--quick`` or not, its sizes)
and the same datasched version: anything else is run afresh.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasched._files import atomic_write_text
from datasched.sim.parallel import SchedulerRef, map_in_processes

__all__ = ["MISSING", "RunStore", "Unit", "run_units"]

_MISSING = object()
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]+")


@dataclass(frozen=True, slots=True)
class Unit:
    """One independent piece of a reproduction's work: a stable ``key`` (what a resumed run
    finds it by), a ``label`` for progress lines, and ``run``, which returns plain JSON data
    (numbers, strings, lists, dicts) and pickles, so that it can run in another process.
    ``cost`` estimates its CPU seconds (ponce's :func:`~datasched.studies.ponce.figures.cost_of`),
    so that the largest start first (equal costs keep their order)."""

    key: str
    label: str
    run: Callable[[], Any]
    cost: float = 0.0


class RunStore:
    """Finished runs, one JSON file each under ``root``, tagged with what they belong to
    (``tag``: the study, its options, the version); a run stored under another tag is not
    read back."""

    def __init__(self, root: Path, tag: Mapping[str, Any]) -> None:
        self.root = root
        self.tag = _plain(dict(tag))  # as it reads back (a tuple of sizes becomes a list)

    def path(self, key: str) -> Path:
        """The file of run ``key``: its key made safe for a file name, and a hash of it
        (two keys that differ only in unsafe characters stay apart)."""
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        return self.root / f"{_UNSAFE.sub('_', key)[:80]}-{digest}.json"

    def get(self, key: str) -> Any:
        """The stored result of run ``key``, or :data:`MISSING` (none, another tag, or a
        file that does not read back whole)."""
        try:
            doc = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return _MISSING
        if not isinstance(doc, dict) or doc.get("key") != key or doc.get("tag") != self.tag:
            return _MISSING
        return doc.get("result", _MISSING)

    def put(self, key: str, result: Any) -> None:
        """Keep ``result`` (written whole or not at all: a run stopped mid-write leaves the
        earlier file or none)."""
        self.root.mkdir(parents=True, exist_ok=True)
        doc = {"key": key, "tag": self.tag, "result": result}
        atomic_write_text(self.path(key), json.dumps(doc, allow_nan=True) + "\n")

    def clear(self) -> None:
        """Forget every stored run (a run that does not resume starts afresh)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def __len__(self) -> int:
        return len(list(self.root.glob("*.json"))) if self.root.is_dir() else 0


MISSING = _MISSING
"""What :meth:`RunStore.get` returns for a run it does not hold."""


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the wall-clock seconds it took (in a worker process)."""
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def _plain(result: Any) -> Any:
    """``result`` as JSON reads it back (tuples become lists), so that a run read back from
    the store and one just finished give the same report."""
    return json.loads(json.dumps(result, allow_nan=True))


def run_units(
    units: Sequence[Unit],
    *,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    store: RunStore | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Any]:
    """Every unit's result, in the order of ``units``: read back from ``store`` where it
    holds them, the rest run (in up to ``processes`` processes, or on the Dask cluster at
    ``scheduler``), each stored as it finishes. ``say`` gets a line per finished run; the
    rest start in order of their ``cost`` (an estimate, largest first), which changes no
    result.
    """
    tell = say or (lambda _: None)
    results: dict[int, Any] = {}
    todo: list[int] = []
    for i, unit in enumerate(units):
        kept = store.get(unit.key) if store is not None else _MISSING
        if kept is _MISSING:
            todo.append(i)
        else:
            results[i] = kept
    if results and store is not None:
        tell(f"{len(results)} of {len(units)} runs read back from {store.root}")
    todo.sort(key=lambda i: -units[i].cost)
    finished = len(results)

    def done(j: int, out: tuple[Any, float]) -> None:
        nonlocal finished
        i = todo[j]
        result, seconds = out
        results[i] = _plain(result)
        if store is not None:
            store.put(units[i].key, results[i])
        finished += 1
        tell(f"[{finished}/{len(units)}] {units[i].label} ({seconds:.1f} s)")

    map_in_processes(
        _timed,
        [units[i].run for i in todo],
        processes=processes,
        scheduler=scheduler,
        on_done=done,
    )
    return [results[i] for i in range(len(units))]
