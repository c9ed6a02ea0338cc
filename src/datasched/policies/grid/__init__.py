"""The data grid's schedulers (ranganathan-foster §3-§4): external and dataset
schedulers, in a registry of their own (docs/grid.md)."""

from __future__ import annotations

__all__: list[str] = []
