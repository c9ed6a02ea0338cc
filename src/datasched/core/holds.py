"""Pins and fetches in flight: the bookkeeping both kinds of node cache share.

A pin protects data from eviction while it is read; a fetch in flight is data being read into
the cache, which holds no space until it completes and only what was really read is
inserted. Each is kept under a token the caller gives back. A cache says, through
:meth:`Holds._held`, what a piece of data stands for in its grain (the data itself for a
range cache, the whole files it touches for a file cache).
"""

from __future__ import annotations

import itertools

from datasched.core.intervals import IntervalSet

__all__ = ["Holds"]

_EMPTY = IntervalSet()


class Holds:
    """Mixin of :class:`~datasched.core.cache.RangeCache` and
    :class:`~datasched.core.filecache.FileCache`; call :meth:`_init_holds` from ``__init__``."""

    __slots__ = ("_fetch_ids", "_fetches", "_pin_ids", "_pins")

    def _init_holds(self) -> None:
        self._pins: dict[int, IntervalSet] = {}
        self._pin_ids = itertools.count()
        self._fetches: dict[int, IntervalSet] = {}
        self._fetch_ids = itertools.count()

    def _held(self, data: IntervalSet) -> IntervalSet:
        """What ``data`` stands for when pinned or fetched."""
        return data

    def insert(self, data: IntervalSet, stamp: float) -> tuple[IntervalSet, IntervalSet]:
        raise NotImplementedError

    @property
    def pinned(self) -> IntervalSet:
        """Events that may not be evicted now."""
        out = _EMPTY
        for data in self._pins.values():
            out = out | data
        return out

    @property
    def in_flight(self) -> IntervalSet:
        """Events being fetched into this cache."""
        out = _EMPTY
        for data in self._fetches.values():
            out = out | data
        return out

    def pin(self, data: IntervalSet) -> int:
        """Protect ``data`` from eviction until :meth:`unpin` with the returned token."""
        token = next(self._pin_ids)
        self._pins[token] = self._held(data)
        return token

    def unpin(self, token: int) -> None:
        del self._pins[token]

    def begin_fetch(self, data: IntervalSet) -> int:
        """Note that ``data`` is being read into this cache; returns a token for end_fetch."""
        token = next(self._fetch_ids)
        self._fetches[token] = self._held(data)
        return token

    def end_fetch(
        self, token: int, completed: IntervalSet, stamp: float
    ) -> tuple[IntervalSet, IntervalSet]:
        """Finish a fetch: ``completed`` (of what was fetched) is inserted, the rest dropped.
        Returns what :meth:`insert` returns."""
        fetched = self._fetches.pop(token)
        return self.insert(completed & fetched, stamp)
