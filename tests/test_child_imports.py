"""What the program inside a sandbox imports before its first packet: each import is paid at
every sandbox's start, once per user, processor and worker (docs/security.md, "Every job in
a sandbox"), so the child imports nothing of the scheduler and the demo's processor nothing
of the dataset writer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
import datasched.sandbox.child
import datasched.runtime.processor
import datasched.runtime.demodata
import datasched.runtime.compute
print(json.dumps(sorted(sys.modules)))
"""


def _imported() -> set[str]:
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {sys.path!r}\n{_PROBE}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(out.stdout))


def test_a_sandbox_start_imports_neither_the_core_nor_the_writers_modules() -> None:
    mods = _imported()
    assert "uproot" in mods  # the probe ran the child's imports
    assert "datasched.sandbox.child" in mods
    unwanted = {
        m
        for m in mods
        if m.startswith(("datasched.core", "datasched.sandbox.confine", "yaml", "xml."))
    }
    assert not unwanted, f"imported at a sandbox's start: {sorted(unwanted)}"


def test_the_lazy_names_still_resolve() -> None:
    import datasched
    import datasched.sandbox as sandbox
    from datasched.core import scheduler
    from datasched.sandbox import confine

    assert sandbox.Confinement is confine.Confinement
    assert sandbox.sandbox_problem is confine.sandbox_problem
    assert scheduler.VALIDATE_ENV == datasched.VALIDATE_ENV == "DATASCHED_VALIDATE"
    with pytest.raises(AttributeError, match="NoSuchName"):
        sandbox.NoSuchName  # noqa: B018
