"""The servers with free slots, grouped by how many they have (:class:`FreeSlots`): what the
min-cost flow reads to build a batch without a pass over every server.

Pure bookkeeping: the owner says each server's count as it changes
(:meth:`CoScheduling._recount <datasched.policies.cosched.model.CoScheduling._recount>`), the
index only files it. Every operation costs O(log n) plus a shift of one sorted list of
servers (a memory move), none a pass over the servers in Python.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence

__all__ = ["FreeSlots"]


class FreeSlots:
    """Server -> its free slots (servers with some only), and for each count the servers
    with that many, ascending."""

    __slots__ = ("_by_count", "_free")

    def __init__(self, counts: Iterable[tuple[int, int]] = ()) -> None:
        self._free: dict[int, int] = {}
        self._by_count: dict[int, list[int]] = {}
        for node, free in sorted(counts):
            self.set(node, free)

    def set(self, node: int, free: int) -> None:
        """``node`` now has ``free`` free slots (0 or fewer: none)."""
        old = self._free.get(node, 0)
        if old == free or (old == 0 and free <= 0):
            return
        if old > 0:
            members = self._by_count[old]
            del members[bisect_left(members, node)]
            if not members:
                del self._by_count[old]
        if free > 0:
            self._free[node] = free
            if free in self._by_count:
                insort(self._by_count[free], node)
            else:
                self._by_count[free] = [node]
        else:
            del self._free[node]

    def free(self, node: int) -> int:
        """``node``'s free slots (0 if it has none)."""
        return self._free.get(node, 0)

    def counts(self) -> list[int]:
        """The distinct free-slot counts, ascending."""
        return sorted(self._by_count)

    def servers(self, count: int) -> Sequence[int]:
        """The servers with ``count`` free slots, ascending (read only: the index's own)."""
        return self._by_count.get(count, ())

    def lowest(self) -> int | None:
        """The lowest server with a free slot, None if none has one."""
        if not self._by_count:
            return None
        return min(members[0] for members in self._by_count.values())

    def items(self) -> Iterator[tuple[int, int]]:
        """(server, free slots), in no particular order."""
        return iter(self._free.items())

    def as_dict(self) -> dict[int, int]:
        """Server -> free slots, servers ascending (what ``CoScheduling.capacities`` says)."""
        return {n: self._free[n] for n in sorted(self._free)}

    def __len__(self) -> int:
        return len(self._free)

    def total(self) -> int:
        """Free slots over every server."""
        return sum(c * len(m) for c, m in self._by_count.items())
