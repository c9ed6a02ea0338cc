"""datasched: cache-aware scheduling of data-intensive analysis jobs on clusters.

One scheduling core (:mod:`datasched.core`) with pluggable policies
(:mod:`datasched.policies`), driven by a discrete-event simulator (:mod:`datasched.sim`).
"""

from __future__ import annotations

import os

from datasched.core import scheduler as _scheduler

__version__ = "0.1.0"


def _validate_from_environment() -> bool:
    """``DATASCHED_VALIDATE=1``: every scheduler built checks its books after the events
    (docs/design.md, "Invariants and tracing"); read when each scheduler is built."""
    return os.environ.get(_scheduler.VALIDATE_ENV, "") not in ("", "0")


_scheduler.validate_by_default = _validate_from_environment
__all__ = ["__version__"]
