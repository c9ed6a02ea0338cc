"""The build's one step beyond pyproject.toml: the simulator's hot path compiled by Cython.

Each module of ``datasched._compiled.HOT`` is compiled from its own ``.py`` (typed by the
``.pxd`` beside it, where there is one) into an extension module next to it, and
``_compiled.json`` records each compiled source's digest, so that a source edited since is
imported as it is, never its stale build (``src/datasched/_compiled.py``). The extensions are
optional: without a C compiler, Cython or Python's headers the package installs as pure
Python and runs the same (more slowly). ``DATASCHED_PURE_BUILD=1`` skips them.

``make venv`` installs the package editable and then compiles in place,
``python setup.py build_ext --inplace``, which recompiles only the sources changed since.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "src" / "datasched"


def _finder_module() -> ModuleType:
    """src/datasched/_compiled.py loaded on its own, not the package (it imports the standard
    library alone; tests/sim/test_compiled.py checks it): its ``HOT`` and ``source_digest``
    are the build's, so the build records digests as the finder computes them."""
    spec = importlib.util.spec_from_file_location("_datasched_compiled", PACKAGE / "_compiled.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FINDER = _finder_module()


def source_of(name: str) -> Path:
    return PACKAGE.joinpath(*name.split(".")).with_suffix(".py")


def extensions() -> list[object]:
    if os.environ.get("DATASCHED_PURE_BUILD", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("setup.py: Cython is not installed; building pure Python", file=sys.stderr)
        return []
    from setuptools import Extension

    # core/cache.py's ``_order`` reads a double's bits through a pointer to a 64-bit integer.
    # C's aliasing rules leave that undefined, and Python's own flags (-O3, no
    # -fno-strict-aliasing) let gcc assume the double is never read that way: it warned that
    # the read saw an uninitialized value. With the rule off the read is the value stored.
    # (MSVC has no such rule and no such flag.)
    flags = [] if sys.platform == "win32" else ["-fno-strict-aliasing"]
    modules = [
        Extension(
            f"datasched.{name}",
            [str(source_of(name).relative_to(ROOT))],
            extra_compile_args=flags,
            optional=True,  # no compiler or headers: the module stays pure Python
        )
        for name in FINDER.HOT
    ]
    try:
        compiled = cythonize(
            modules,
            build_dir="build/cython",  # the generated C, out of the source tree
            language_level=3,
            nthreads=os.cpu_count() or 1,
            quiet=True,
            compiler_directives={
                # Python-level functions (signatures, functools.wraps, pickling by name).
                "binding": True,
                # The .py's annotations are for mypy (``int`` may be a sentinel's default);
                # C types come only from the .pxd files.
                "annotation_typing": False,
            },
        )
    except Exception as exc:  # a construct this Cython cannot compile: the sources still run
        print(f"setup.py: Cython failed ({exc}); building pure Python", file=sys.stderr)
        return []
    return list(compiled)


class BuildHot(build_ext):
    """build_ext that writes ``_compiled.json`` for the extensions it built (or found up to
    date), beside them: in the source tree with ``--inplace``, in the wheel otherwise."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # a wheel's build too: one compiler a core
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self._built: set[str] = set()
        digests = {
            e.name: FINDER.source_digest(source_of(e.name[len("datasched.") :]))
            for e in self.extensions
        }
        super().run()
        if not self.extensions:
            return
        if self.inplace or getattr(self, "editable_mode", False):
            target = PACKAGE  # where an editable install copies the extensions too
        else:
            target = Path(self.get_ext_fullpath("datasched._compiled")).parent
        target.mkdir(parents=True, exist_ok=True)
        manifest = {
            name[len("datasched.") :]: digests[name]
            for name in sorted(self._built)
            if name in digests
        }
        (target / "_compiled.json").write_text(
            json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        print(
            f"setup.py: {len(manifest)} of {len(self.extensions)} hot modules compiled",
            file=sys.stderr,
        )

    def build_extension(self, ext: object) -> None:
        super().build_extension(ext)  # raises where the build failed (kept optional above it)
        self._built.add(ext.name)  # type: ignore[attr-defined]


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildHot})
