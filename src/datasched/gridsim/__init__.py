"""The data-grid simulator (ranganathan-foster §3, §5): sites of processors and
storage joined by links, built on the cluster simulator's engine (docs/grid.md)."""

from __future__ import annotations

__all__: list[str] = []
