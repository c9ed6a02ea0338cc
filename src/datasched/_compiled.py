"""The simulator's hot path compiled from these same sources, and the switch back to them.

``setup.py`` compiles the modules of :data:`HOT` with Cython where a C compiler is found: each
module's own ``.py`` (with the typed declarations of the ``.pxd`` beside it, where there is
one) becomes an extension module next to it, and ``_compiled.json`` records the digest of
each source built. The ``.py`` files stay the one source of truth and the reference: the
interpreter would prefer an extension module to the source beside it, and the finder here lets
it only where every source is the one its extension was built from (an edited source is never
shadowed by a stale build, and then the whole hot path runs from its sources), and never under
``DATASCHED_PURE=1``. CI runs the suite on the compiled build and again, with coverage, on the
sources (docs/performance.md, "The hot path compiled from its sources").

This module imports no other of the package: ``datasched/__init__.py`` installs the finder
before anything else is imported, in every process (a sandbox's too), at the cost of one
``sys.meta_path`` entry; the manifest is read, and the sources hashed (about 600 kB), only when
a module of :data:`HOT` is first imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

__all__ = [
    "HOT",
    "MANIFEST",
    "PURE_ENV",
    "build_available",
    "build_is_current",
    "check_build",
    "compiled_names",
    "install",
    "pure_requested",
    "source_digest",
]

PURE_ENV = "DATASCHED_PURE"
"""Set to 1: import every module from its source, compiled or not (the reference build)."""

MANIFEST = "_compiled.json"
"""Beside this file: ``{"core.intervals": "<sha256 of core/intervals.py>", ...}`` for each
module the last build compiled."""

HOT: tuple[str, ...] = (
    # The data model and the scheduling core: every event passes through these.
    "core.actions",
    "core.cache",
    "core.commands",
    "core.data",
    "core.directory",
    "core.dispatch",
    "core.estimates",
    "core.events",
    "core.filecache",
    "core.holds",
    "core.hot",
    "core.intervals",
    "core.model",
    "core.packets",
    "core.policy",
    "core.replacement",
    "core.scheduler",
    "core.splitindex",
    "core.state",
    # The simulator's engine.
    "sim.disks",
    "sim.engine",
    "sim.fetches",
    "sim.master",
    "sim.moves",
    "sim.network",
    "sim.packetcut",
    "sim.queueing",
    "sim.recorder",
    "sim.state",
    "sim.subjobs",
    # The Ponce-Hersch policies (the facility-scale targets are theirs).
    "policies.ponce.adaptive",
    "policies.ponce.delayed",
    "policies.ponce.fcfs",
    "policies.ponce.outoforder",
)
"""The modules compiled, relative to ``datasched``: those a simulation's events pass through
(measured in docs/performance.md). A module of its own elsewhere in the package stays
interpreted; one added here needs nothing else (``setup.py`` reads this tuple)."""

_HOT = frozenset(HOT)
_HERE = Path(__file__).resolve().parent
_current: dict[Path, bool] = {}
"""Per package directory: whether its build is current (:func:`build_is_current`)."""


def pure_requested() -> bool:
    """Whether ``DATASCHED_PURE`` asks for the sources."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_digest(path: Path) -> str:
    """The sha256 of a file's bytes, as the manifest records it."""
    import hashlib  # here, not above: most processes never hash (the module's docstring)

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_manifest(root: Path) -> dict[str, str]:
    import json  # here, not above: read when a module of HOT is first imported

    try:
        loaded = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _has_extension(directory: Path, leaf: str) -> bool:
    return any((directory / (leaf + s)).exists() for s in EXTENSION_SUFFIXES)


def check_build(root: Path, manifest: dict[str, str]) -> bool:
    """Whether every module of :data:`HOT` under the package directory ``root`` has an
    extension beside its source, built from that source as it is now (``manifest``)."""
    for name in HOT:
        parts = name.split(".")
        directory = root.joinpath(*parts[:-1])
        recorded = manifest.get(name)
        if recorded is None or not _has_extension(directory, parts[-1]):
            return False
        try:
            if source_digest(directory / (parts[-1] + ".py")) != recorded:
                return False
        except OSError:
            return False
    return True


def build_available() -> bool:
    """Whether the installed package's build is current (:func:`check_build`), whether this
    process uses it or not (``DATASCHED_PURE``)."""
    return check_build(_HERE, _read_manifest(_HERE))


def build_is_current(root: Path | None = None) -> bool:
    """Whether this process imports the compiled build: ``DATASCHED_PURE`` is not set and
    :func:`check_build` holds for the whole of :data:`HOT`. All or nothing: a compiled module
    reads the fields of the compiled classes it imports from the others directly, so one
    module from its source beside the others compiled would be read wrongly. Decided once a
    process, at the first import of a module of HOT, and kept: the sources are hashed once."""
    if pure_requested():
        return False
    root = _HERE if root is None else root
    if root not in _current:
        _current[root] = check_build(root, _read_manifest(root))
    return _current[root]


def compiled_names() -> list[str]:
    """The modules of :data:`HOT` imported compiled in this process: all of them or none."""
    return list(HOT) if build_is_current() else []


class _SourceUnlessBuilt:
    """A finder ahead of the path's: for a module of :data:`HOT` where the build is not
    current (see :func:`build_is_current`), the source's spec; otherwise, and for any other
    module, nothing (the path's finder then picks the extension where there is one)."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("datasched.") or not path:
            return None
        name = fullname[len("datasched.") :]
        if name not in _HOT:
            return None
        directory = Path(path[0])
        depth = name.count(".")  # core.intervals: the package's directory is one up
        if build_is_current(directory.parents[depth - 1] if depth else directory):
            return None
        source = directory / (name.rsplit(".", 1)[-1] + ".py")
        if not source.exists():
            return None
        import importlib.util  # here: most processes import no module of HOT

        return importlib.util.spec_from_file_location(fullname, source)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _SourceUnlessBuilt) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceUnlessBuilt())
