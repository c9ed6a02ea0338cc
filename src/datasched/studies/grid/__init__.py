"""The study of ranganathan-foster: external and dataset schedulers on a data
grid (docs/reproduction-grid.md)."""

from __future__ import annotations

__all__: list[str] = []
