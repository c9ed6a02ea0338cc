"""datasched: cache-aware scheduling of data-intensive analysis jobs on clusters.

One scheduling core (:mod:`datasched.core`) with pluggable policies
(:mod:`datasched.policies`), driven by a discrete-event simulator (:mod:`datasched.sim`).
"""

from __future__ import annotations

import os

from datasched import _compiled

# Before any other module of the package: the hot path's compiled modules are used only where
# they were built from the sources beside them (datasched/_compiled.py).
_compiled.install()

__version__ = "0.1.0"

VALIDATE_ENV = "DATASCHED_VALIDATE"
"""Set to 1 (read when each scheduler is built) to validate the books after the events."""


def validate_from_environment() -> bool:
    """``DATASCHED_VALIDATE=1``: every scheduler built checks its books after the events
    (docs/design.md, "Invariants and tracing"). The core reads no environment: it takes this
    reader from here when :mod:`datasched.core.scheduler` is imported. (The root imports no
    module of its own but ``_compiled``, which imports nothing else of the package: the
    program inside a sandbox imports it, and the core's import is about 48 ms of a sandbox's
    start.)"""
    return os.environ.get(VALIDATE_ENV, "") not in ("", "0")


__all__ = ["VALIDATE_ENV", "__version__", "validate_from_environment"]
