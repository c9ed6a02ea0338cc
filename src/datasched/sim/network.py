"""Transfers over shared links, as a fluid (docs/design.md, "The engines"; ranganathan-foster §5.1:
"keeping track of the number of simultaneous data transfers across a link and decreasing the
bandwidth available for each transfer accordingly").

Each link's bandwidth is split equally among the transfers crossing it; a transfer goes at
the least of its shares along its path. Rates are recomputed whenever a transfer on one of
its links starts or ends, so a transfer costs a few events, not one per byte. Rates on a link
never add up to more than its bandwidth, and every byte is moved once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from datasched.core.model import Link

__all__ = ["Network", "Transfer"]


@dataclass(slots=True, eq=False)
class Transfer:
    """A transfer in flight: bytes left as of ``since``, moving at ``rate``."""

    transfer_id: int
    path: tuple[Link, ...]
    n_bytes: float
    left: float
    rate: float = 0.0
    since: float = 0.0
    version: int = 0
    """Bumped whenever its rate changes: a completion event of an older version is stale."""
    tag: object = field(default=None)
    """What the engine wants back when it completes."""

    def eta(self) -> float:
        """When it completes at its current rate."""
        if self.left <= 0:
            return self.since
        return self.since + self.left / self.rate


class Network:
    """Transfers in flight and the links they share."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self.transfers: dict[int, Transfer] = {}
        self._on_link: dict[Link, set[int]] = {}

    def start(
        self, path: tuple[Link, ...], n_bytes: float, now: float, tag: object = None
    ) -> tuple[Transfer, list[Transfer]]:
        """Start moving ``n_bytes`` along ``path``; returns the transfer and every transfer
        whose rate changed (itself included), each with its new :meth:`Transfer.eta`."""
        t = Transfer(next(self._ids), path, n_bytes, n_bytes, since=now, tag=tag)
        self.transfers[t.transfer_id] = t
        for link in path:
            self._on_link.setdefault(link, set()).add(t.transfer_id)
        if not path:
            t.rate = float("inf")
            t.left = 0.0
            return t, [t]
        return t, self._reflow(self._sharing(path), now)

    def finish(self, transfer_id: int, now: float) -> tuple[Transfer, list[Transfer]]:
        """Take a completed (or aborted) transfer out; returns it and the transfers whose
        rates changed as its bandwidth is freed."""
        t = self.transfers.pop(transfer_id)
        t.left = max(t.left - t.rate * (now - t.since), 0.0) if t.path else 0.0
        t.since = now
        for link in t.path:
            users = self._on_link[link]
            users.discard(transfer_id)
            if not users:
                del self._on_link[link]
        return t, self._reflow(self._sharing(t.path), now)

    def rate_on(self, link: Link) -> float:
        """The bandwidth the transfers crossing ``link`` use now."""
        return sum(self.transfers[i].rate for i in self._on_link.get(link, ()))

    def count_on(self, link: Link) -> int:
        """How many transfers cross ``link`` now."""
        return len(self._on_link.get(link, ()))

    def _sharing(self, path: tuple[Link, ...]) -> list[Transfer]:
        ids: set[int] = set()
        for link in path:
            ids |= self._on_link.get(link, set())
        return [self.transfers[i] for i in sorted(ids)]

    def _reflow(self, affected: list[Transfer], now: float) -> list[Transfer]:
        changed = []
        for t in affected:
            rate = min(link.bytes_per_s / len(self._on_link[link]) for link in t.path)
            if rate == t.rate:
                continue
            t.left = max(t.left - t.rate * (now - t.since), 0.0)
            t.since = now
            t.rate = rate
            t.version += 1
            changed.append(t)
        return changed
