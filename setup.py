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

import ast
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "src" / "datasched"


def hot_modules() -> tuple[str, ...]:
    """``HOT`` of src/datasched/_compiled.py, read without importing the package."""
    tree = ast.parse((PACKAGE / "_compiled.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "HOT":
            assert node.value is not None
            value = ast.literal_eval(node.value)
            return tuple(value)
    raise SystemExit("setup.py: src/datasched/_compiled.py defines no HOT")


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

    modules = [
        Extension(
            f"datasched.{name}",
            [str(source_of(name).relative_to(ROOT))],
            optional=True,  # no compiler or headers: the module stays pure Python
        )
        for name in hot_modules()
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
        digests = {e.name: _digest(source_of(e.name[len("datasched.") :])) for e in self.extensions}
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


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildHot})
