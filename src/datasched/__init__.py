"""datasched: cache-aware scheduling of data-intensive analysis jobs on clusters.

One scheduling core (:mod:`datasched.core`) with pluggable policies
(:mod:`datasched.policies`), driven by a discrete-event simulator (:mod:`datasched.sim`).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
