"""The policies of ponce-hersch: processing farm, job splitting, cache-oriented
splitting, out-of-order, delayed and adaptive-delay scheduling (docs/policies.md)."""

from __future__ import annotations

__all__: list[str] = []
