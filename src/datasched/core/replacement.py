"""Replacement rules of node caches: which cached range or file goes first when room is needed."""

from __future__ import annotations

from typing import Protocol

__all__ = ["FIFO", "LRU", "Replacement"]


class Replacement(Protocol):
    """How a cached range's replacement key is set; the range with the smallest key goes first."""

    name: str

    def key_on_insert(self, stamp: float) -> float:
        """Key of a range inserted at time ``stamp``."""
        ...

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        """Key of a cached range read again at time ``stamp``."""
        ...


class _LRU:
    """Least recently used: reading a range refreshes it (ponce-hersch Table 2)."""

    name = "lru"

    def key_on_insert(self, stamp: float) -> float:
        return stamp

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        return stamp


class _FIFO:
    """First in, first out: reading a range does not refresh it."""

    name = "fifo"

    def key_on_insert(self, stamp: float) -> float:
        return stamp

    def key_on_touch(self, old_key: float, stamp: float) -> float:
        return old_key


LRU: Replacement = _LRU()
FIFO: Replacement = _FIFO()
